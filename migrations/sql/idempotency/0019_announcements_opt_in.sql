-- The change announcements of 0016 and 0018 leave the idempotency line for
-- a line of their own, replaycache (0020), which only services that keep
-- finished records in an in-process replay cache (idempotency.ReplayCache)
-- apply: nobody else listens on payonce_idempotency_changed, yet every
-- completion paid the UPDATE trigger's WHEN (read back from text and
-- prepared for each statement: 4-7 % of the server's CPU per claim and
-- completion in BENCHMARKS.md, issue 28).
--
-- pgstore.NewExecutor refuses a ReplayCache on a schema without the
-- replaycache line (migrations.NotMigratedError naming it), and the
-- store's change listener confirms nothing to a cache while the triggers
-- are missing or disabled, so a cache is never served unannounced.
--
-- `payonce migrate up` (every line) applies 0019 and 0020 one after the
-- other: the triggers are dropped and created again. Should 0020 already
-- be recorded (a migration tool that ran the lines' scripts out of
-- order), this version leaves its triggers alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM payonce_migrations WHERE version = 20) THEN
        DROP TRIGGER IF EXISTS idempotency_finished_deleted ON idempotency_store;
        DROP TRIGGER IF EXISTS idempotency_finished_changed ON idempotency_store;
        DROP TRIGGER IF EXISTS idempotency_truncated ON idempotency_store;
        DROP FUNCTION IF EXISTS idempotency_announce_change();
    END IF;
END $$;
