-- When the current attempt's provider references were first sent. A
-- provider deduplicates a reference only for a while (Stripe 24 h, PayPal
-- 6 h for an order's create and capture): past that window a re-sent
-- reference is a NEW request, so payments never re-sends it then; it looks
-- the attempt up instead. NULL: the attempt was reopened (a new attempt
-- number) and has not been sent yet. Existing intents count from their
-- creation (their attempt was sent just after).
ALTER TABLE payment_intents ADD COLUMN attempt_sent_at TIMESTAMPTZ;
UPDATE payment_intents SET attempt_sent_at = created_at WHERE status <> 'PENDING' OR attempt = 0;

-- The client's key of the action, whatever the scope: a client key belongs
-- to the one scope that used it first. Another scope sending it is refused
-- (404) and nothing is created. NULL for intents recorded before this
-- version.
ALTER TABLE payment_intents ADD COLUMN client_key VARCHAR(255);
CREATE UNIQUE INDEX uq_payment_intents_client_key ON payment_intents (kind, client_key)
    WHERE client_key IS NOT NULL;

-- A success event naming another provider object than the one an intent
-- settled with: a second charge at the provider for one intent. Recorded
-- without effect; the reconciler reports it ("several charges at
-- provider").
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_outcome_check;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_outcome_check
    CHECK (outcome IN ('applied', 'confirmed', 'stale', 'conflict', 'unmatched', 'ignored', 'second_object'));
DROP INDEX idx_webhook_events_review;
CREATE INDEX idx_webhook_events_review ON webhook_events (received_at)
    WHERE outcome IN ('conflict', 'unmatched', 'second_object');
