-- Sagas (package saga): multi-step actions under one idempotency key. The
-- saga's idempotency record (idempotency_store, key "{scope}_saga_{key}")
-- says who may drive it; these rows say how far it got. They are written
-- only by the record's lease holder, each step's transition in one
-- transaction with the step's local effects, fenced by the record's
-- lock_version.
CREATE TABLE sagas (
    scope            VARCHAR(128)  NOT NULL,
    -- The client's key of the saga; its steps' sub-keys are
    -- "<saga_key>_<step>" and "<saga_key>_<step>_compensate".
    saga_key         VARCHAR(255)  NOT NULL,
    -- The saga's idempotency record (user_id = scope).
    idempotency_key  VARCHAR(255)  NOT NULL,
    definition       VARCHAR(64)   NOT NULL,
    fingerprint      CHAR(64)      NOT NULL,
    status           VARCHAR(20)   NOT NULL DEFAULT 'RUNNING'
        CHECK (status IN ('RUNNING', 'COMPENSATING', 'COMPLETED', 'ROLLED_BACK', 'NEEDS_REVIEW')),
    -- The step last run or compensated (0-based position).
    current_step     INT           NOT NULL DEFAULT 0,
    input            JSONB         NOT NULL,
    -- The step whose permanent failure started the compensation, and why
    -- (for NEEDS_REVIEW: which compensation failed, and why).
    failed_step      VARCHAR(64),
    reason           TEXT,
    created_at       TIMESTAMPTZ   NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ   NOT NULL DEFAULT now(),
    finished_at      TIMESTAMPTZ,
    CONSTRAINT pk_sagas PRIMARY KEY (scope, saga_key),
    CONSTRAINT chk_sagas_finished CHECK ((status IN ('COMPLETED', 'ROLLED_BACK', 'NEEDS_REVIEW')) = (finished_at IS NOT NULL)),
    CONSTRAINT chk_sagas_failed_step CHECK (status IN ('RUNNING', 'COMPLETED') OR failed_step IS NOT NULL)
);
-- Recovery's work list: sagas not finished, oldest progress first.
CREATE INDEX idx_sagas_open ON sagas (updated_at) WHERE status IN ('RUNNING', 'COMPENSATING');

CREATE TABLE saga_steps (
    scope                  VARCHAR(128)  NOT NULL,
    saga_key               VARCHAR(255)  NOT NULL,
    position               INT           NOT NULL CHECK (position >= 0),
    name                   VARCHAR(64)   NOT NULL,
    -- LOCAL: effects in this database, committed with the transition;
    -- REMOTE: a call outside, idempotent by the step's sub-key.
    kind                   VARCHAR(10)   NOT NULL CHECK (kind IN ('LOCAL', 'REMOTE')),
    status                 VARCHAR(20)   NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('PENDING', 'RUNNING', 'UNKNOWN', 'DONE', 'FAILED', 'COMPENSATING', 'COMPENSATED', 'NEEDS_REVIEW')),
    output                 JSONB,
    -- The last attempt's error (of the action, or of the compensation once
    -- compensating); NULL after a success.
    error                  TEXT,
    attempts               INT           NOT NULL DEFAULT 0,
    compensation_attempts  INT           NOT NULL DEFAULT 0,
    started_at             TIMESTAMPTZ,
    finished_at            TIMESTAMPTZ,
    compensated_at         TIMESTAMPTZ,
    updated_at             TIMESTAMPTZ   NOT NULL DEFAULT now(),
    CONSTRAINT pk_saga_steps PRIMARY KEY (scope, saga_key, position),
    CONSTRAINT uq_saga_steps_name UNIQUE (scope, saga_key, name),
    CONSTRAINT fk_saga_steps_saga FOREIGN KEY (scope, saga_key) REFERENCES sagas (scope, saga_key) ON DELETE CASCADE,
    -- A step that has been done keeps its output: later steps and its own
    -- compensation read it.
    CONSTRAINT chk_saga_steps_output CHECK (status NOT IN ('DONE', 'COMPENSATING', 'COMPENSATED', 'NEEDS_REVIEW') OR output IS NOT NULL)
);
