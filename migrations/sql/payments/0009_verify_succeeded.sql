-- The reconciler checks, once, that what succeeded locally is there at
-- the provider (a local success without a charge, or with another amount,
-- is a divergence too).
ALTER TABLE payment_intents ADD COLUMN verified_at TIMESTAMPTZ;
CREATE INDEX idx_payment_intents_unverified ON payment_intents (updated_at)
    WHERE status = 'SUCCEEDED' AND kind = 'CHARGE' AND verified_at IS NULL;
