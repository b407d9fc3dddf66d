-- The webhook inbox: every verified provider event once, keyed by the
-- provider's event id, stored in the same transaction as its effect on
-- intents and the ledger. A redelivery finds its row and changes nothing.
CREATE TABLE webhook_events (
    provider      VARCHAR(32)   NOT NULL,
    event_id      TEXT          NOT NULL,
    event_type    TEXT          NOT NULL,
    kind          VARCHAR(24)   NOT NULL,
    -- What the event names: the reference payonce sent, the local key,
    -- the provider's object and (refunds, captures) its charge.
    reference     TEXT,
    local_key     TEXT,
    provider_id   TEXT,
    charge_id     TEXT,
    amount        NUMERIC,
    currency      CHAR(3),
    decline_code  TEXT,
    -- The intent it was applied to, when one matched.
    intent_key    VARCHAR(255),
    intent_user   VARCHAR(128),
    -- applied: it moved the intent; confirmed: the intent already said so;
    -- stale: it would move the intent backwards (ignored); conflict: it
    -- contradicts a final local state (the reconciler reports it);
    -- unmatched: no local intent; ignored: a type payonce does not act on.
    outcome       VARCHAR(16)   NOT NULL
        CHECK (outcome IN ('applied', 'confirmed', 'stale', 'conflict', 'unmatched', 'ignored')),
    detail        TEXT          NOT NULL DEFAULT '',
    body          BYTEA         NOT NULL,
    received_at   TIMESTAMPTZ   NOT NULL DEFAULT now(),
    CONSTRAINT pk_webhook_events PRIMARY KEY (provider, event_id)
);
CREATE INDEX idx_webhook_events_reference ON webhook_events (provider, reference) WHERE reference IS NOT NULL;
CREATE INDEX idx_webhook_events_provider_id ON webhook_events (provider, provider_id) WHERE provider_id IS NOT NULL;
CREATE INDEX idx_webhook_events_review ON webhook_events (received_at) WHERE outcome IN ('conflict', 'unmatched');

-- Events find their intent by the provider's object or by the reference
-- payonce sent.
CREATE INDEX idx_payment_intents_provider_id ON payment_intents (provider, provider_id) WHERE provider_id IS NOT NULL;
CREATE INDEX idx_payment_intents_provider_key ON payment_intents (provider, provider_key);
