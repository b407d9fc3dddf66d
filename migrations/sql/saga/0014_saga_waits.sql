-- A saga step or compensation can wait for something outside to happen
-- (saga.Wait: a charge that has not settled yet, so that its refund cannot
-- be decided). The saga is then rescheduled rather than retried at once:
-- wake_at is when recovery looks at it again (the database's clock; NULL:
-- not waiting, recovery takes it as soon as its driver is gone). A
-- client's retry drives it whatever wake_at says.
ALTER TABLE sagas ADD COLUMN wake_at TIMESTAMPTZ;

-- Why a step was compensated without undoing anything (saga.NothingToUndo:
-- a charge that was declined needs no refund), kept with the step.
ALTER TABLE saga_steps ADD COLUMN note TEXT;
