-- The reconciler: a check schedule per intent, claims that expire, runs
-- and their items (the divergence report and the audit of every repair).
ALTER TABLE payment_intents
    ADD COLUMN review_reason            TEXT,
    -- How often the reconciler has examined the intent, when it may look
    -- again (backoff), and until when one reconciler holds it.
    ADD COLUMN reconcile_checks         INT          NOT NULL DEFAULT 0,
    ADD COLUMN reconcile_next_at        TIMESTAMPTZ,
    ADD COLUMN reconcile_claimed_until  TIMESTAMPTZ,
    ADD COLUMN reconcile_claimed_by     TEXT;

-- Open intents by when they are due.
CREATE INDEX idx_payment_intents_reconcile ON payment_intents (coalesce(reconcile_next_at, updated_at))
    WHERE status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION');

CREATE TABLE reconcile_runs (
    id                 BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance           TEXT         NOT NULL,
    started_at         TIMESTAMPTZ  NOT NULL DEFAULT now(),
    finished_at        TIMESTAMPTZ,
    examined           INT          NOT NULL DEFAULT 0,
    repaired           INT          NOT NULL DEFAULT 0,
    failed_with_proof  INT          NOT NULL DEFAULT 0,
    needs_review       INT          NOT NULL DEFAULT 0,
    rescheduled        INT          NOT NULL DEFAULT 0,
    divergences        INT          NOT NULL DEFAULT 0,
    error              TEXT
);

-- One row per divergence found (and per repair made): what payonce said,
-- what the provider said, what was done. Repairs write theirs in the
-- same transaction as the repair.
CREATE TABLE reconcile_items (
    id              BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          BIGINT       NOT NULL REFERENCES reconcile_runs (id),
    kind            TEXT         NOT NULL,
    provider        TEXT         NOT NULL,
    scope           TEXT         NOT NULL DEFAULT '',
    intent_key      TEXT         NOT NULL DEFAULT '',
    intent_kind     TEXT         NOT NULL DEFAULT '',
    currency        TEXT         NOT NULL DEFAULT '',
    local_state     TEXT         NOT NULL DEFAULT '',
    provider_state  TEXT         NOT NULL DEFAULT '',
    action          TEXT         NOT NULL,
    detail          TEXT         NOT NULL DEFAULT '',
    -- How old the intent (or record) was when examined.
    age             INTERVAL,
    created_at      TIMESTAMPTZ  NOT NULL DEFAULT now()
);
CREATE INDEX idx_reconcile_items_run ON reconcile_items (run_id);
CREATE INDEX idx_reconcile_items_kind ON reconcile_items (kind, created_at);
