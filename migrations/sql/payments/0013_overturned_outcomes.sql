-- A provider can overturn a final local state: a charge recorded DECLINED
-- whose own provider object succeeds afterwards (a Stripe PaymentIntent
-- confirmed again after requires_payment_method, a PayPal order captured
-- after INSTRUMENT_DECLINED), a refund recorded SUCCEEDED that fails
-- afterwards (Stripe's failed refunds, Adyen's REFUND_FAILED). The event
-- that says so is stored with what payonce did about it:
--   succeeded_after_decline      the charge was booked (intent SUCCEEDED,
--                                ledger entry, the key's record answers
--                                the success);
--   refund_failed_after_success  the refund was reversed (intent FAILED,
--                                reversal entry, reservation released, the
--                                key's record answers the failure);
--   needs_review                 it could not be booked safely: the intent
--                                is NEEDS_REVIEW with the reason.
-- The reconciler reports each of them. Outcomes grow past 16 characters.
DROP INDEX idx_webhook_events_review;
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_outcome_check;
ALTER TABLE webhook_events ALTER COLUMN outcome TYPE VARCHAR(32);
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_outcome_check
    CHECK (outcome IN ('applied', 'confirmed', 'stale', 'conflict', 'unmatched', 'ignored', 'second_object',
                       'succeeded_after_decline', 'refund_failed_after_success', 'needs_review'));
CREATE INDEX idx_webhook_events_review ON webhook_events (received_at)
    WHERE outcome IN ('conflict', 'unmatched', 'second_object',
                      'succeeded_after_decline', 'refund_failed_after_success', 'needs_review');
