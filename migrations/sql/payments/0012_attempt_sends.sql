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
-- Intents recorded before this version: sent at least once. An open one
-- may have been re-sent since its first send, when is not known: its last
-- send stays NULL, and its lookup ends where it used to (the provider's
-- window from the first send).
UPDATE payment_intents SET attempt_sends = 1,
       attempt_last_sent_at = CASE WHEN status IN ('PENDING', 'UNKNOWN', 'REQUIRES_ACTION') THEN NULL
                                   ELSE coalesce(attempt_sent_at, created_at) END
 WHERE attempt_sent_at IS NOT NULL;
