-- Refunds: a refund intent points at its charge, and the charge reserves
-- the refunded amount before the provider is called. The CHECK makes the
-- database, not the application, refuse refunds beyond the charge, even
-- when several are recorded at once.
ALTER TABLE payment_intents
    ADD COLUMN charge_key       VARCHAR(255),
    ADD COLUMN refund_reserved  NUMERIC NOT NULL DEFAULT 0,
    ADD CONSTRAINT chk_refunds_within_charge CHECK (refund_reserved >= 0 AND refund_reserved <= amount),
    ADD CONSTRAINT chk_refund_has_charge CHECK ((kind = 'REFUND') = (charge_key IS NOT NULL));
