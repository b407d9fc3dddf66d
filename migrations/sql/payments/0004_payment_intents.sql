-- Payment intents: recorded BEFORE every provider call, with the provider
-- references derived from the local key, so that a crash at any instant
-- leaves a row from which a retry or the reconciler resolves the outcome.
CREATE TABLE payment_intents (
    idempotency_key  VARCHAR(255)  NOT NULL,
    user_id          VARCHAR(128)  NOT NULL,
    kind             VARCHAR(10)   NOT NULL CHECK (kind IN ('CHARGE', 'REFUND')),
    provider         VARCHAR(32)   NOT NULL,
    -- The provider idempotency key of the current attempt; only a proven
    -- void attempt may move to the next (attempt + 1).
    provider_key     VARCHAR(255)  NOT NULL,
    attempt          INT           NOT NULL DEFAULT 0,
    provider_id      TEXT,
    amount           NUMERIC       NOT NULL CHECK (amount > 0),
    currency         CHAR(3)       NOT NULL,
    recipient        TEXT          NOT NULL,
    payment_method   TEXT          NOT NULL,
    status           VARCHAR(20)   NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION', 'SUCCEEDED', 'DECLINED', 'FAILED', 'NEEDS_REVIEW')),
    decline_code     TEXT,
    created_at       TIMESTAMPTZ   NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ   NOT NULL DEFAULT now(),
    CONSTRAINT pk_payment_intents PRIMARY KEY (idempotency_key, user_id)
);
-- The reconciler's work list: intents whose outcome is still open.
CREATE INDEX idx_payment_intents_open ON payment_intents (updated_at)
    WHERE status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION');
