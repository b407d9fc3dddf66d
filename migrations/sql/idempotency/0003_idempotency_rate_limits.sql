-- New keys per scope per fixed window, for pgstore.Limiter: a rate limit
-- of key creation shared by every instance of a service.
CREATE TABLE idempotency_rate_limits (
    user_id       VARCHAR(128)  NOT NULL,
    window_start  TIMESTAMPTZ   NOT NULL,
    keys_created  INT           NOT NULL,
    CONSTRAINT pk_idempotency_rate_limits PRIMARY KEY (user_id, window_start)
);
CREATE INDEX idx_idempotency_rate_limits_window ON idempotency_rate_limits (window_start);
