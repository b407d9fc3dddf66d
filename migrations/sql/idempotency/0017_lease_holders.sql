-- Who holds a lease: the stable name of the instance that took it (a
-- process restarted by its supervisor under the same name, e.g. a
-- StatefulSet pod or a systemd unit instance; pgstore's Config.Instance)
-- and the random id of that process's incarnation. When an instance
-- starts again under its name, it ends at once the live leases of its
-- earlier incarnations, whose processes are gone, so that a retry takes
-- the key over at once (raising its lock version, the fencing token that
-- keeps anything of the old holder from recording an outcome) instead of
-- waiting for the lease to run out.
--
-- Both columns are NULL for existing rows and for stores without an
-- instance name: adding them rewrites nothing, and such leases run out as
-- before. The release at startup finds the live leases through the
-- existing partial index on locked_until (PROCESSING records only, as many
-- as actions in flight): no index of their own, so a claim writes no more
-- index entries than before.
ALTER TABLE idempotency_store
    ADD COLUMN holder_instance    VARCHAR(128),
    ADD COLUMN holder_incarnation BIGINT;
