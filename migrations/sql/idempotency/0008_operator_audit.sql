-- What operators did to the data with the payonce CLI (`payonce release`):
-- who, when, to which record, with what effect. Each row commits in the
-- same transaction as the change it describes, and rows are only ever
-- inserted.
--
-- The key itself is never stored (keys may carry customer identifiers):
-- key_sha256 is SHA-256 of the key in lowercase hex. Its first 12
-- characters are the idempotency.ShortHash that `payonce stuck` and the
-- logs print, so a runbook finds a record's audit rows from a log line
-- (key_sha256 LIKE '<short hash>%', served by the "C" collation index) or
-- from the full key (key_sha256 = encode(sha256(convert_to(key, 'UTF8')), 'hex')).
CREATE TABLE operator_audit (
    id          BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          TIMESTAMPTZ  NOT NULL DEFAULT now(),
    -- The operating system user that ran the command ($USER), as its
    -- client claims it; db_user is the role the database authenticated.
    actor       TEXT         NOT NULL,
    db_user     TEXT         NOT NULL DEFAULT current_user,
    command     TEXT         NOT NULL,
    scope       VARCHAR(128),
    key_sha256  TEXT         COLLATE "C" CHECK (key_sha256 ~ '^[0-9a-f]{64}$'),
    -- What the command saw and did (lock version, lease, forced, reason).
    detail      JSONB        NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_operator_audit_key ON operator_audit (key_sha256) WHERE key_sha256 IS NOT NULL;
