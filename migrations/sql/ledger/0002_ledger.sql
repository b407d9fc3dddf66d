-- The double-entry ledger (package ledger).
--
-- Accounts, entries and postings are append-only: triggers refuse UPDATE,
-- DELETE and TRUNCATE. Corrections are new reversing entries.
--
-- Amounts are signed NUMERIC: positive postings are debits, negative ones
-- credits. Per currency the postings of an entry sum to zero, checked by
-- deferred constraint triggers at commit, so the database refuses an
-- unbalanced entry whoever writes it.
--
-- No posting ever updates an account row: an account's balance is its
-- latest snapshot plus the postings after it (ledger_balance_snapshots), so
-- entries hitting the same accounts from many transactions never queue on
-- one row lock. For the same reason postings carry no FOREIGN KEY to
-- ledger_accounts (its check would take FOR KEY SHARE on the hot account
-- row for every posting); a trigger checks the account instead, which is
-- safe because accounts are never deleted or changed.

-- Accounts are identified by (code, currency). minor_units is the
-- currency's ISO 4217 exponent, recorded when the account is opened, so the
-- database can refuse amounts finer than the currency allows.
CREATE TABLE ledger_accounts (
    id           BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    code         TEXT         NOT NULL,
    currency     TEXT         NOT NULL,
    minor_units  SMALLINT     NOT NULL,
    created_at   TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT ledger_accounts_code_currency UNIQUE (code, currency),
    CONSTRAINT ledger_accounts_code CHECK (code ~ '^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}$'),
    CONSTRAINT ledger_accounts_currency CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT ledger_accounts_minor_units CHECK (minor_units BETWEEN 0 AND 4)
);

-- One entry per (key, step): key is the action's idempotency key, step the
-- step of the action that posts ("charge", "refund", ...). posted_at is the
-- database clock at the start of the posting transaction; xid is that
-- transaction's id, which lets only it add postings to the entry.
CREATE TABLE ledger_entries (
    id           BIGINT       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key          TEXT         NOT NULL,
    step         TEXT         NOT NULL,
    description  TEXT         NOT NULL DEFAULT '',
    posted_at    TIMESTAMPTZ  NOT NULL DEFAULT now(),
    xid          XID8         NOT NULL DEFAULT pg_current_xact_id(),
    CONSTRAINT ledger_entries_key_step UNIQUE (key, step),
    CONSTRAINT ledger_entries_key CHECK (octet_length(key) BETWEEN 1 AND 255),
    CONSTRAINT ledger_entries_step CHECK (octet_length(step) BETWEEN 1 AND 64),
    CONSTRAINT ledger_entries_description CHECK (octet_length(description) <= 1024)
);

-- Postings: n is the posting's position in its entry. currency repeats the
-- account's currency so the balance check needs no join; posted_at and xid
-- repeat the entry's so balance reads need no join either.
CREATE TABLE ledger_postings (
    entry_id     BIGINT       NOT NULL REFERENCES ledger_entries (id),
    n            SMALLINT     NOT NULL,
    account_id   BIGINT       NOT NULL,
    currency     TEXT         NOT NULL,
    amount       NUMERIC      NOT NULL,
    posted_at    TIMESTAMPTZ  NOT NULL,
    xid          XID8         NOT NULL,
    CONSTRAINT ledger_postings_pkey PRIMARY KEY (entry_id, n),
    CONSTRAINT ledger_postings_amount CHECK (amount <> 0)
);
-- Balance reads: the postings of an account after its latest snapshot.
CREATE INDEX ledger_postings_account_xid ON ledger_postings (account_id, xid) INCLUDE (amount);
-- An account's entries in order, and balances as of a time.
CREATE INDEX ledger_postings_account_time ON ledger_postings (account_id, posted_at, entry_id) INCLUDE (amount);

-- A snapshot is the sum of an account's postings written by transactions
-- with xid < upto_xid. upto_xid is the xmin of a database snapshot, so every
-- such transaction had already committed or aborted: the sum is final and
-- no late commit can ever change it. A balance is the latest snapshot plus
-- the postings with xid >= upto_xid. Rows are computed by the insert
-- trigger below from the postings themselves (whatever values an INSERT
-- supplies are replaced), so a snapshot cannot be forged; deleting
-- snapshots is allowed and only makes reads slower.
CREATE TABLE ledger_balance_snapshots (
    account_id   BIGINT       NOT NULL,
    upto_xid     XID8         NOT NULL,
    balance      NUMERIC      NOT NULL,
    postings     BIGINT       NOT NULL,
    taken_at     TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT ledger_balance_snapshots_pkey PRIMARY KEY (account_id, upto_xid)
);

-- Append-only: refuse UPDATE, DELETE and TRUNCATE.
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'restrict_violation',
        CONSTRAINT = 'ledger_append_only',
        MESSAGE = format('ledger: %s is append-only: %s refused', TG_TABLE_NAME, TG_OP),
        HINT = 'Correct an entry by posting a reversing entry.';
END $$;

CREATE TRIGGER ledger_accounts_append_only BEFORE UPDATE OR DELETE ON ledger_accounts
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_accounts_no_truncate BEFORE TRUNCATE ON ledger_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_postings_no_truncate BEFORE TRUNCATE ON ledger_postings
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_balance_snapshots_no_update BEFORE UPDATE ON ledger_balance_snapshots
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

-- An entry's time and transaction come from the database, not the writer.
CREATE FUNCTION ledger_entries_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.posted_at := now();
    NEW.xid := pg_current_xact_id();
    RETURN NEW;
END $$;

CREATE TRIGGER ledger_entries_stamp BEFORE INSERT ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_entries_stamp();

-- A posting joins an entry only in the transaction that created the entry
-- (a committed entry is closed), names an existing account in the
-- account's currency, and is no finer than the currency's minor unit.
CREATE FUNCTION ledger_postings_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    e ledger_entries%ROWTYPE;
    a ledger_accounts%ROWTYPE;
BEGIN
    SELECT * INTO e FROM ledger_entries WHERE id = NEW.entry_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'ledger_postings_entry_id_fkey',
            MESSAGE = format('ledger: posting refers to entry %s, which does not exist', NEW.entry_id);
    END IF;
    IF e.xid <> pg_current_xact_id() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'restrict_violation',
            CONSTRAINT = 'ledger_append_only',
            MESSAGE = format('ledger: entry %s (%s/%s) is closed: postings can only be added by the transaction that creates the entry',
                             e.id, e.key, e.step);
    END IF;
    SELECT * INTO a FROM ledger_accounts WHERE id = NEW.account_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'ledger_postings_account',
            MESSAGE = format('ledger: posting of entry %s refers to account %s, which does not exist', NEW.entry_id, NEW.account_id);
    END IF;
    IF a.currency <> NEW.currency THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'ledger_postings_currency',
            MESSAGE = format('ledger: posting of %s %s to account %s, which is held in %s',
                             NEW.amount, NEW.currency, a.code, a.currency);
    END IF;
    IF scale(trim_scale(NEW.amount)) > a.minor_units THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'ledger_postings_precision',
            MESSAGE = format('ledger: posting of %s %s to account %s has more than %s decimal places',
                             NEW.amount, NEW.currency, a.code, a.minor_units);
    END IF;
    NEW.posted_at := e.posted_at;
    NEW.xid := e.xid;
    RETURN NEW;
END $$;

CREATE TRIGGER ledger_postings_check BEFORE INSERT ON ledger_postings
    FOR EACH ROW EXECUTE FUNCTION ledger_postings_check();

-- At commit: every entry has at least two postings ...
CREATE FUNCTION ledger_entry_check_postings() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n BIGINT;
BEGIN
    SELECT count(*) INTO n FROM ledger_postings WHERE entry_id = NEW.id;
    IF n < 2 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'ledger_entry_postings',
            MESSAGE = format('ledger: entry %s (%s/%s) has %s posting(s); an entry needs at least 2',
                             NEW.id, NEW.key, NEW.step, n);
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER ledger_entry_postings AFTER INSERT ON ledger_entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_entry_check_postings();

-- ... and per currency its postings sum to zero. This fires for every
-- posting (not only per entry) so that a posting added after
-- SET CONSTRAINTS ALL IMMEDIATE is still checked.
CREATE FUNCTION ledger_entry_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad RECORD;
BEGIN
    SELECT currency, sum(amount) AS total INTO bad
      FROM ledger_postings
     WHERE entry_id = NEW.entry_id
     GROUP BY currency
    HAVING sum(amount) <> 0
     ORDER BY currency
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            CONSTRAINT = 'ledger_entry_balanced',
            MESSAGE = format('ledger: entry %s (%s) is unbalanced: its %s postings sum to %s, not 0',
                             NEW.entry_id,
                             (SELECT e.key || '/' || e.step FROM ledger_entries e WHERE e.id = NEW.entry_id),
                             bad.currency, bad.total);
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER ledger_entry_balanced AFTER INSERT ON ledger_postings
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_entry_check_balanced();

-- Snapshots compute themselves: INSERT INTO ledger_balance_snapshots
-- (account_id) VALUES (...) records the account's final balance up to the
-- current snapshot's xmin, from the previous snapshot and the postings
-- since. Nothing is inserted when no transaction has finished since.
CREATE FUNCTION ledger_balance_snapshots_compute() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_upto     XID8 := pg_snapshot_xmin(pg_current_snapshot());
    v_from     XID8 := '0';
    v_balance  NUMERIC := 0;
    v_postings BIGINT := 0;
BEGIN
    SELECT s.upto_xid, s.balance, s.postings INTO v_from, v_balance, v_postings
      FROM ledger_balance_snapshots s
     WHERE s.account_id = NEW.account_id
     ORDER BY s.upto_xid DESC
     LIMIT 1;
    IF NOT FOUND THEN
        v_from := '0';
        v_balance := 0;
        v_postings := 0;
    ELSIF v_from >= v_upto THEN
        RETURN NULL;
    END IF;
    SELECT v_balance + coalesce(sum(p.amount), 0), v_postings + count(*)
      INTO NEW.balance, NEW.postings
      FROM ledger_postings p
     WHERE p.account_id = NEW.account_id
       AND p.xid >= v_from
       AND p.xid < v_upto;
    NEW.upto_xid := v_upto;
    NEW.taken_at := now();
    RETURN NEW;
END $$;

CREATE TRIGGER ledger_balance_snapshots_compute BEFORE INSERT ON ledger_balance_snapshots
    FOR EACH ROW EXECUTE FUNCTION ledger_balance_snapshots_compute();

-- The balance of an account now: latest snapshot plus the postings after
-- it, and how many postings that was (the read's cost). STABLE, so both
-- parts read the calling statement's snapshot.
CREATE FUNCTION ledger_account_balance(p_account BIGINT, OUT balance NUMERIC, OUT tail BIGINT)
STABLE LANGUAGE plpgsql AS $$
DECLARE
    v_upto XID8 := '0';
    v_base NUMERIC := 0;
BEGIN
    SELECT s.upto_xid, s.balance INTO v_upto, v_base
      FROM ledger_balance_snapshots s
     WHERE s.account_id = p_account
     ORDER BY s.upto_xid DESC
     LIMIT 1;
    IF NOT FOUND THEN
        v_upto := '0';
        v_base := 0;
    END IF;
    SELECT v_base + coalesce(sum(p.amount), 0), count(*) INTO balance, tail
      FROM ledger_postings p
     WHERE p.account_id = p_account AND p.xid >= v_upto;
END $$;

-- The balance of an account as of a time: the sum of the postings of
-- entries posted at or before p_at. It sums whichever side of p_at is
-- likely shorter: the postings up to p_at, or the current balance minus
-- the postings after p_at.
CREATE FUNCTION ledger_account_balance_at(p_account BIGINT, p_at TIMESTAMPTZ)
RETURNS NUMERIC STABLE LANGUAGE plpgsql AS $$
DECLARE
    v_created TIMESTAMPTZ;
    v_now     NUMERIC;
BEGIN
    SELECT created_at INTO v_created FROM ledger_accounts WHERE id = p_account;
    IF p_at >= v_created + (now() - v_created) / 2 THEN
        SELECT b.balance INTO v_now FROM ledger_account_balance(p_account) b;
        RETURN v_now - coalesce((SELECT sum(p.amount) FROM ledger_postings p
                                  WHERE p.account_id = p_account AND p.posted_at > p_at), 0);
    END IF;
    RETURN coalesce((SELECT sum(p.amount) FROM ledger_postings p
                      WHERE p.account_id = p_account AND p.posted_at <= p_at), 0);
END $$;

-- Post one entry in one round trip. Outcomes, one row:
--   posted           the entry and its postings were inserted
--   replayed         an entry with this (key, step) and the same postings
--                    (same accounts, currencies and amounts, in any order)
--                    exists; nothing was written
--   conflict         an entry with this (key, step) and different postings
--                    exists; nothing was written
--   unknown_account  no account (code, currency) for posting bad_posting
--                    (1-based); nothing was written
--   wrong_currency   the account code of posting bad_posting exists, but
--                    not in that currency; nothing was written
-- Balance and shape are checked by the triggers above, at commit.
CREATE FUNCTION ledger_post(p_key TEXT, p_step TEXT, p_description TEXT,
                            p_codes TEXT[], p_currencies TEXT[], p_amounts NUMERIC[])
RETURNS TABLE (r_outcome TEXT, r_entry_id BIGINT, r_posted_at TIMESTAMPTZ, r_bad_posting INT)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids     BIGINT[];
    v_missing INT;
    v_entry   BIGINT;
    v_at      TIMESTAMPTZ;
BEGIN
    SELECT array_agg(a.id ORDER BY p.ord), min(p.ord) FILTER (WHERE a.id IS NULL)
      INTO v_ids, v_missing
      FROM unnest(p_codes, p_currencies) WITH ORDINALITY AS p(code, currency, ord)
      LEFT JOIN ledger_accounts a ON a.code = p.code AND a.currency = p.currency;
    IF v_missing IS NOT NULL THEN
        RETURN QUERY SELECT
            CASE WHEN EXISTS (SELECT 1 FROM ledger_accounts WHERE code = p_codes[v_missing])
                 THEN 'wrong_currency' ELSE 'unknown_account' END,
            NULL::BIGINT, NULL::TIMESTAMPTZ, v_missing;
        RETURN;
    END IF;

    INSERT INTO ledger_entries (key, step, description)
    VALUES (p_key, p_step, p_description)
    ON CONFLICT ON CONSTRAINT ledger_entries_key_step DO NOTHING
    RETURNING id, posted_at INTO v_entry, v_at;

    IF v_entry IS NULL THEN
        SELECT e.id, e.posted_at INTO v_entry, v_at
          FROM ledger_entries e WHERE e.key = p_key AND e.step = p_step;
        IF NOT FOUND THEN
            -- The conflicting entry committed after this transaction's
            -- snapshot (REPEATABLE READ or SERIALIZABLE caller).
            RAISE EXCEPTION USING
                ERRCODE = 'serialization_failure',
                MESSAGE = format('ledger: entry %s/%s was posted concurrently and is not visible to this transaction; retry it', p_key, p_step);
        END IF;
        IF EXISTS (
            (SELECT a.code, q.currency, q.amount
               FROM ledger_postings q JOIN ledger_accounts a ON a.id = q.account_id
              WHERE q.entry_id = v_entry
             EXCEPT ALL
             SELECT * FROM unnest(p_codes, p_currencies, p_amounts))
            UNION ALL
            (SELECT * FROM unnest(p_codes, p_currencies, p_amounts)
             EXCEPT ALL
             SELECT a.code, q.currency, q.amount
               FROM ledger_postings q JOIN ledger_accounts a ON a.id = q.account_id
              WHERE q.entry_id = v_entry)
        ) THEN
            RETURN QUERY SELECT 'conflict'::TEXT, v_entry, v_at, NULL::INT;
        ELSE
            RETURN QUERY SELECT 'replayed'::TEXT, v_entry, v_at, NULL::INT;
        END IF;
        RETURN;
    END IF;

    INSERT INTO ledger_postings (entry_id, n, account_id, currency, amount, posted_at, xid)
    SELECT v_entry, p.ord, p.id, p.currency, p.amount, v_at, '0'
      FROM unnest(v_ids, p_currencies, p_amounts) WITH ORDINALITY AS p(id, currency, amount, ord);

    RETURN QUERY SELECT 'posted'::TEXT, v_entry, v_at, NULL::INT;
END $$;
