-- Every send of the current attempt's provider references is counted,
-- before it goes out: attempt_sends is the intent's send counter and
-- attempt_last_sent_at the last send's time (the database's clock). A
-- settling decision (the reconciler's, an operator's) is a compare-and-set
-- on the attempt and its send counter as it examined them: a proof about
-- an attempt is never applied once that attempt was sent again after the
-- proof's lookup began ("changed, look again"). The last send also bounds
-- the window in which the provider can have created the attempt's object.
ALTER TABLE payment_intents ADD COLUMN attempt_sends INTEGER NOT NULL DEFAULT 0;
ALTER TABLE payment_intents ADD COLUMN attempt_last_sent_at TIMESTAMPTZ;
UPDATE payment_intents SET attempt_sends = 1, attempt_last_sent_at = coalesce(attempt_sent_at, created_at)
 WHERE attempt_sent_at IS NOT NULL;
