-- The idempotency store: one row per (key, scope). Columns, keys and
-- constraints follow the reference DDL; the additions are marked "added".
CREATE TABLE idempotency_store (
    idempotency_key  VARCHAR(255)  NOT NULL,
    user_id          VARCHAR(128)  NOT NULL,
    fingerprint      CHAR(64)      NOT NULL,
    status           VARCHAR(20)   NOT NULL DEFAULT 'PROCESSING',
    response_code    INT,
    -- Metadata of the stored response as JSON (replayed headers, how the
    -- body is stored). The body itself is not kept here: JSONB reorders
    -- keys, drops whitespace and duplicate keys, and cannot hold non-JSON
    -- bodies, so a replay would not be byte for byte.
    response_body    JSONB,
    lock_version     INT           NOT NULL DEFAULT 0,
    locked_until     TIMESTAMPTZ,
    created_at       TIMESTAMPTZ   NOT NULL DEFAULT NOW(),
    completed_at     TIMESTAMPTZ,
    expires_at       TIMESTAMPTZ   NOT NULL,
    -- added: the exact bytes of the stored response body, replayed byte for
    -- byte whatever their content type (NULL when nothing is stored).
    response_raw     BYTEA,
    CONSTRAINT pk_idempotency PRIMARY KEY (idempotency_key, user_id),
    CONSTRAINT chk_status CHECK (status IN ('PROCESSING', 'COMPLETED', 'FAILED'))
);
CREATE INDEX idx_idempotency_expires ON idempotency_store (expires_at) WHERE status != 'PROCESSING';
CREATE INDEX idx_idempotency_orphan_locks ON idempotency_store (locked_until) WHERE status = 'PROCESSING';
