package design

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The Python kits: a Django middleware on MySQL/MariaDB (PyMySQL) and a
// FastAPI dependency on PostgreSQL (psycopg 3). Both implement D2's
// statements for their store; their tests run under pytest against real
// servers (lab/designkit).
func init() {
	registerKit([]string{"python-django", "python-fastapi"}, pythonKit)
}

func pythonKit(d *Document) *Kit {
	if strings.ToLower(strings.TrimSpace(d.Answers.Stack.Language)) != "python" {
		return nil
	}
	fw := strings.ToLower(d.Answers.Stack.Framework)
	switch {
	case strings.Contains(fw, "django") && d.Store == StoreMySQL:
		return djangoKit(d)
	case strings.Contains(fw, "fastapi") && d.Store == StorePostgres:
		return fastapiKit(d)
	}
	return nil
}

// pyStr is s as a Python string literal (a JSON string is one).
func pyStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pyActions is the ACTIONS table of the kit's actions.py: per action its
// kind, route or source, significant fields and lock timeout.
func pyActions(d *Document) string {
	var b strings.Builder
	b.WriteString("ACTIONS = {\n")
	for _, x := range d.Actions {
		method, path := "", ""
		if x.Kind == "http" || x.Kind == "webhook" {
			if m, p, ok := strings.Cut(strings.TrimSpace(x.Trigger), " "); ok && strings.HasPrefix(strings.TrimSpace(p), "/") {
				method, path = strings.ToUpper(m), strings.TrimSpace(p)
			}
		}
		var fields []string
		for _, f := range x.Fields {
			fields = append(fields, pyStr(f))
		}
		fmt.Fprintf(&b, "    %s: {\n", pyStr(x.Name))
		fmt.Fprintf(&b, "        \"kind\": %s,\n", pyStr(x.Kind))
		if path != "" {
			fmt.Fprintf(&b, "        \"method\": %s,\n        \"path\": %s,\n", pyStr(method), pyStr(path))
		} else if x.Trigger != "" {
			fmt.Fprintf(&b, "        \"source\": %s,\n", pyStr(x.Trigger))
		}
		fmt.Fprintf(&b, "        \"fields\": [%s],\n", strings.Join(fields, ", "))
		if x.Kind == "webhook" {
			fmt.Fprintf(&b, "        \"key_field\": %s,  # the key's intent: %s\n", pyStr(pyKeyField(x.IdentifyingFields)), pyComment(strings.Join(x.IdentifyingFields, ", ")))
		}
		fmt.Fprintf(&b, "        \"lock_timeout\": %d,  # seconds: 3x the p99 (%s), at least 30\n", int(x.LockTimeout.Seconds()), human(x.DurationD))
		fmt.Fprintf(&b, "        \"heartbeat\": %s,  # seconds: the lease is extended this often while the action runs\n", pySeconds(x.Heartbeat))
		b.WriteString("    },\n")
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "\n# How long a key is kept (%s): %s.\nRETENTION_SECONDS = %d\n", human(d.Retention), pyComment(d.RetentionReason), int(d.Retention.Seconds()))
	return b.String()
}

// pySeconds is d in seconds as a Python number, to the millisecond.
func pySeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', -1, 64)
}

// pyKeyField is the body field of a webhook event that identifies it:
// a provider's event id is its "id".
func pyKeyField(ids []string) string {
	if len(ids) == 0 {
		return "id"
	}
	f := strings.ToLower(strings.TrimSpace(ids[0]))
	if f == "id" || strings.HasSuffix(f, "event id") || strings.HasSuffix(f, "event_id") {
		return "id"
	}
	var b strings.Builder
	for _, r := range f {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
			b.WriteByte('_')
		}
	}
	return strings.Trim(b.String(), "_")
}

// pyComment keeps a text on one comment line, shortened at its first
// semicolon.
func pyComment(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if i := strings.Index(s, ";"); i > 0 {
		s = s[:i]
	}
	return s
}

const pyActionsHead = `"""The protected actions of __SERVICE__ (section 1 of the design): the
significant fields the fingerprint covers (section 3), the lock timeout and
the heartbeat (section 4) of each. Tests may lower a lock timeout or a
heartbeat (0 turns it off); nothing else should.
"""

`

// pyFingerprint is D4, the same for both stacks.
const pyFingerprint = `"""The request fingerprint (section 3): SHA-256 of the action's significant
fields, in a canonical JSON form, and a constant-time comparison."""
import hashlib
import hmac
import json

from .actions import ACTIONS


def fingerprint(action: str, body: dict) -> str:
    """Hex SHA-256 of the action's significant fields of body.

    Only the fields named in ACTIONS count: timestamps, trace ids, the key
    and field order never change a fingerprint. A missing field and a null
    one are the same.
    """
    fields = ACTIONS[action]["fields"]
    significant = {f: body.get(f) for f in fields}
    canonical = json.dumps([action, significant], sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def same(a: str, b: str) -> bool:
    """Compare two fingerprints in constant time (no early exit)."""
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))
`

// pyHeartbeat is the lease's heartbeat, the same for both stacks: a
// thread with a connection of its own runs the store's fenced renew.
const pyHeartbeat = `"""The heartbeat of a held lease (section 4): while the action runs, a
thread extends the lease every interval, on a database connection of its
own, by the database's clock and fenced by the holder's lock_version. A
live holder keeps its key however long the action takes; a crashed one
stops beating and its lease ends within the lock timeout. When a renewal
matches no row, another holder took the key over: the heartbeat stops,
lost is set, and the holder's fenced completion will be refused."""
import hashlib
import logging
import threading

from . import store

log = logging.getLogger(__name__)


def check(action: str, lease: float, interval: float) -> None:
    """Refuses a heartbeat that cannot keep its lease: it must be shorter
    than the lock timeout (a third of it is the design's), or 0 (off)."""
    if lease <= 0:
        raise ValueError(f"ACTIONS[{action!r}]: lock_timeout must be positive seconds, got {lease!r}")
    if interval < 0 or interval >= lease:
        raise ValueError(f"ACTIONS[{action!r}]: heartbeat ({interval!r}s) must be shorter than lock_timeout "
                         f"({lease!r}s), a third of it is the design's, or 0 to turn heartbeats off")


class Heartbeat:
    """Renews (key, scope, version)'s lease for lease seconds every
    interval seconds (0: no heartbeat) until stop(). connect() opens the
    heartbeat's connection; it is closed when the heartbeat ends."""

    def __init__(self, connect, key: str, scope: str, version: int, lease: float, interval: float):
        self.connect, self.key, self.scope, self.version = connect, key, scope, version
        self.lease, self.interval = lease, interval
        self.lost = threading.Event()  # set once a renewal found the lease taken over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="idempotency-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        if self.interval > 0:
            self._thread.start()
        return self

    def held(self) -> bool:
        """False once the lease is known lost: check it before an effect
        outside the record's transaction (an email, a provider call)."""
        return not self.lost.is_set()

    def stop(self) -> None:
        """Stops renewing and waits for a renewal in flight: call it before
        completing. Calling it again does nothing."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(30)

    def _beat(self) -> None:
        conn = None
        try:
            while not self._stop.wait(self.interval):
                try:
                    if conn is None:
                        conn = self.connect()
                    if not store.renew(conn, self.key, self.scope, self.version, self.lease):
                        self.lost.set()
                        log.warning("idempotency: key %s: lease lost to another holder; heartbeat stopped",
                                    short_hash(self.key))
                        return
                except Exception as e:  # the database is away: try again at the next beat
                    log.warning("idempotency: key %s: heartbeat failed: %s", short_hash(self.key), type(e).__name__)
                    if conn is not None:
                        try:
                            conn.close()
                        except Exception:
                            pass
                        conn = None
        finally:
            if conn is not None:
                conn.close()


def short_hash(key: str) -> str:
    """The first 12 hex digits of the key's SHA-256: a log line never
    holds a full key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
`

// pyClaim is the shape both stores return.
const pyClaim = `@dataclass
class Claim:
    """What the claim decided. outcome is one of:
    "run": this request holds the lease (lock_version) and runs the action;
    "replay": a finished record, replayed (code, body);
    "mismatch": same key, other significant fields: refused (422);
    "in_progress": another holder's lease is live (409, Retry-After);
    "other_scope": the key belongs to another user (404).
    """
    outcome: str
    lock_version: int = 0
    code: int = 0
    body: bytes = b""
    retry_after: int = 0
`

func kitReplacer(d *Document) *strings.Replacer {
	return strings.NewReplacer("__SERVICE__", d.Service)
}

// The MySQL store: D2's statements, with PyMySQL.
const pyMySQLStore = `"""The idempotency record on MySQL/MariaDB (InnoDB), section D2: one
INSERT ... ON DUPLICATE KEY UPDATE creates the record if absent; the
decision on an existing record is taken under its row lock (SELECT ...
FOR UPDATE); every instant is NOW(6), the database's clock."""
import math
from dataclasses import dataclass

import pymysql
from pymysql.constants import CLIENT

from .fingerprint import same

DEADLOCK = 1213  # InnoDB chose this transaction as a deadlock victim: retry


def connect(**params) -> pymysql.connections.Connection:
    """A connection whose session clock is UTC (DATETIME keeps no zone).
    An UPDATE's rowcount is the rows it matched (FOUND_ROWS), not those it
    changed, so that a renewal within the same microsecond still counts."""
    conn = pymysql.connect(autocommit=False, init_command="SET time_zone = '+00:00'",
                           client_flag=CLIENT.FOUND_ROWS, **params)
    return conn


` + pyClaim + `

def claim(conn, key: str, scope: str, fp: str, lease: int, retention: int) -> Claim:
    """Create the record if absent, or decide on the one there."""
    for attempt in range(3):
        try:
            return _claim(conn, key, scope, fp, lease, retention)
        except pymysql.err.OperationalError as e:
            conn.rollback()
            if e.args[0] != DEADLOCK or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _claim(conn, key, scope, fp, lease, retention):
    with conn.cursor() as c:
        conn.begin()
        c.execute("SELECT 1 FROM idempotency_store WHERE idempotency_key = %s AND user_id <> %s LIMIT 1",
                  (key, scope))
        if c.fetchone():
            conn.rollback()
            return Claim("other_scope")
        c.execute("""
            INSERT INTO idempotency_store
                   (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at)
            VALUES (%s, %s, %s, 'PROCESSING', 1, NOW(6) + INTERVAL %s SECOND, NOW(6) + INTERVAL %s SECOND)
            ON DUPLICATE KEY UPDATE duplicates = duplicates + 1""", (key, scope, fp, lease, retention))
        if c.rowcount == 1:
            conn.commit()
            return Claim("run", lock_version=1)
        c.execute("""
            SELECT fingerprint, status, lock_version, locked_until, expires_at,
                   response_code, response_body, NOW(6)
              FROM idempotency_store
             WHERE idempotency_key = %s AND user_id = %s
               FOR UPDATE""", (key, scope))
        rfp, status, version, locked_until, expires_at, code, body, db_now = c.fetchone()
        if expires_at <= db_now:  # an expired key is a new request, never a replay
            c.execute("""
                UPDATE idempotency_store
                   SET fingerprint = %s, status = 'PROCESSING', lock_version = lock_version + 1,
                       locked_until = NOW(6) + INTERVAL %s SECOND, expires_at = NOW(6) + INTERVAL %s SECOND,
                       response_code = NULL, response_body = NULL, completed_at = NULL
                 WHERE idempotency_key = %s AND user_id = %s AND expires_at <= NOW(6)""",
                      (fp, lease, retention, key, scope))
            conn.commit()
            return Claim("run", lock_version=version + 1)
        if not same(rfp, fp):
            conn.rollback()
            return Claim("mismatch")
        if status != "PROCESSING":
            conn.rollback()
            return Claim("replay", code=code, body=bytes(body or b""))
        if locked_until is not None and locked_until > db_now:
            conn.rollback()
            wait = math.ceil((locked_until - db_now).total_seconds())
            return Claim("in_progress", retry_after=max(1, wait))
        # The lease ended: take it over by compare-and-swap on lock_version.
        c.execute("""
            UPDATE idempotency_store
               SET lock_version = lock_version + 1, locked_until = NOW(6) + INTERVAL %s SECOND
             WHERE idempotency_key = %s AND user_id = %s AND status = 'PROCESSING'
               AND lock_version = %s AND (locked_until IS NULL OR locked_until <= NOW(6))""",
                  (lease, key, scope, version))
        won = c.rowcount == 1
        conn.commit()
        if won:
            return Claim("run", lock_version=version + 1)
        return Claim("in_progress", retry_after=1)


def complete(conn, key: str, scope: str, version: int, code: int, body: bytes, retention: int) -> bool:
    """Record the outcome, fenced by the holder's lock_version, in the
    transaction of the action's own writes: commit both, or (lease lost)
    roll both back and return False."""
    with conn.cursor() as c:
        c.execute("""
            UPDATE idempotency_store
               SET status = 'COMPLETED', response_code = %s, response_body = %s,
                   completed_at = NOW(6), locked_until = NULL,
                   expires_at = NOW(6) + INTERVAL %s SECOND
             WHERE idempotency_key = %s AND user_id = %s AND lock_version = %s
               AND status = 'PROCESSING'""", (code, body, retention, key, scope, version))
        if c.rowcount != 1:
            conn.rollback()
            return False
    conn.commit()
    return True


def renew(conn, key: str, scope: str, version: int, lease: float) -> bool:
    """The heartbeat: extend the holder's lease to NOW(6) + lease, fenced
    by its lock_version; False when the lease is no longer the holder's.
    conn is the heartbeat's own connection (see connect's heartbeat)."""
    with conn.cursor() as c:
        c.execute("""
            UPDATE idempotency_store
               SET locked_until = NOW(6) + INTERVAL %s MICROSECOND
             WHERE idempotency_key = %s AND user_id = %s AND status = 'PROCESSING'
               AND lock_version = %s""", (int(lease * 1_000_000), key, scope, version))
        held = c.rowcount == 1
    conn.commit()
    return held


def release(conn, key: str, scope: str, version: int) -> None:
    """A transient failure: undo the action's writes and end the lease at
    once, keeping the record, so that a retry re-drives it."""
    conn.rollback()
    with conn.cursor() as c:
        c.execute("""
            UPDATE idempotency_store SET locked_until = NOW(6)
             WHERE idempotency_key = %s AND user_id = %s AND lock_version = %s
               AND status = 'PROCESSING'""", (key, scope, version))
    conn.commit()
`

const pyDjangoMiddleware = `"""Django middleware: claim, run the view, record, replay (sections 4 and
D3). Add it to MIDDLEWARE after AuthenticationMiddleware; settings:

    IDEMPOTENCY_DATABASE = {"host": ..., "port": 3306, "user": ...,
                            "password": ..., "database": ...}  # PyMySQL

The view writes its own rows through request.idempotency_db: they commit
in one InnoDB transaction with the COMPLETED record, or not at all. While
the view runs, a heartbeat extends the lease (request.idempotency_lease:
check its held() before an effect outside that transaction); a request
whose lease was taken over meanwhile gets a 409 and records nothing.
"""
import json
import re

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from . import store
from .actions import ACTIONS, RETENTION_SECONDS
from . import heartbeat
from .fingerprint import fingerprint
from .heartbeat import Heartbeat

KEY = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def _error(status, message, **headers):
    response = JsonResponse({"error": message}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


class IdempotencyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.routes = {(a["method"], a["path"]): name
                       for name, a in ACTIONS.items() if a["kind"] == "http" and "path" in a}
        for name in self.routes.values():
            heartbeat.check(name, ACTIONS[name]["lock_timeout"], ACTIONS[name]["heartbeat"])

    def __call__(self, request):
        name = self.routes.get((request.method, request.path))
        if name is None:
            return self.get_response(request)
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return _error(401, "authentication required: the key is scoped by the user")
        intent = request.headers.get("Idempotency-Key", "")
        if not KEY.fullmatch(intent):
            return _error(400, "Idempotency-Key header required: 1 to 200 of A-Z a-z 0-9 _ . : -, "
                               "one per intent, the same on every retry")
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            return _error(400, "the body is not JSON")
        scope, key = str(user.pk), f"{name}_{intent}"
        conn = store.connect(**settings.IDEMPOTENCY_DATABASE)
        try:
            return self._protected(request, conn, name, scope, key, fingerprint(name, body))
        finally:
            conn.close()

    def _protected(self, request, conn, name, scope, key, fp):
        c = store.claim(conn, key, scope, fp, ACTIONS[name]["lock_timeout"], RETENTION_SECONDS)
        if c.outcome == "other_scope":
            return _error(404, "no such idempotency key")
        if c.outcome == "mismatch":
            return _error(422, "this Idempotency-Key was used with other request fields: use a new key")
        if c.outcome == "in_progress":
            return _error(409, "a request with this key is in progress", Retry_After=str(c.retry_after))
        if c.outcome == "replay":
            response = HttpResponse(c.body, status=c.code, content_type="application/json")
            response["Idempotent-Replayed"] = "true"
            return response
        conn.begin()
        request.idempotency_db = conn
        # Django connections are per thread: the heartbeat opens its own.
        lease = Heartbeat(lambda: store.connect(**settings.IDEMPOTENCY_DATABASE), key, scope, c.lock_version,
                          ACTIONS[name]["lock_timeout"], ACTIONS[name]["heartbeat"])
        request.idempotency_lease = lease
        lease.start()
        try:
            response = self.get_response(request)  # Django turns a view's exception into a 500
        finally:
            lease.stop()  # before completing: no renewal races the fenced update
        if response.status_code >= 500:
            store.release(conn, key, scope, c.lock_version)
            return response
        if not store.complete(conn, key, scope, c.lock_version, response.status_code,
                              response.content, RETENTION_SECONDS):
            return _error(409, "the lease on this key was lost to a retry: its outcome is the retry's")
        return response
`

const pyDjangoConsumer = `"""The RabbitMQ consumer side (section 6): a delivery's key is derived from
its message id (the producer sets properties.message_id once per message,
or use a business id), so every redelivery finds the same record.

With pika: channel.basic_consume(queue, on_message_callback=callback), where

    def callback(ch, method, properties, body):
        outcome = consume(conn, "__CONSUMER__", properties.message_id, tenant, json.loads(body), handler,
                          connect=lambda: store.connect(**settings.IDEMPOTENCY_DATABASE))
        if outcome in ("done", "duplicate"):
            ch.basic_ack(method.delivery_tag)  # only after the record is written
        elif outcome == "mismatch":
            ch.basic_nack(method.delivery_tag, requeue=False)  # to the dead-letter exchange
        else:  # in_progress: another consumer holds it
            ch.basic_nack(method.delivery_tag, requeue=True)
"""
import hashlib
import json

from . import store
from .actions import ACTIONS, RETENTION_SECONDS
from .fingerprint import fingerprint
from .heartbeat import Heartbeat


def consume(conn, action: str, message_id: str, tenant: str, payload: dict, handler, connect) -> str:
    """Run handler(conn, payload, dedup_id) once per (tenant, message id):
    returns "done", "duplicate" (already handled: ack it), "in_progress"
    (another consumer holds it: requeue) or "mismatch" (the message id came
    back with other significant fields: a producer bug; dead-letter it,
    never ack it silently). handler writes through conn, in
    the transaction of the COMPLETED record. An outbound effect (an email)
    is an outbox row written there with dedup_id; a relay sends it at
    least once, passing dedup_id to the receiving service (section 5).
    connect() opens another connection, for the heartbeat that keeps the
    lease while handler runs."""
    if not message_id:
        raise ValueError("message_id is empty: set it in the producer (or derive the key from a business id)")
    # The tenant is part of the key: two tenants' producers may use the same
    # message ids, and neither may find the other's record.
    key = f"{tenant}_{action}_" + hashlib.sha256(message_id.encode("utf-8")).hexdigest()
    c = store.claim(conn, key, tenant, fingerprint(action, payload), ACTIONS[action]["lock_timeout"], RETENTION_SECONDS)
    if c.outcome == "replay":
        return "duplicate"
    if c.outcome in ("mismatch", "other_scope"):
        return "mismatch"
    if c.outcome == "in_progress":
        return "in_progress"
    conn.begin()
    lease = Heartbeat(connect, key, tenant, c.lock_version, ACTIONS[action]["lock_timeout"],
                      ACTIONS[action]["heartbeat"]).start()
    try:
        handler(conn, payload, f"{tenant}_{key}_{action}")
    except Exception:
        lease.stop()
        store.release(conn, key, tenant, c.lock_version)
        raise
    lease.stop()  # before completing: no renewal races the fenced update
    ok = store.complete(conn, key, tenant, c.lock_version, 200, json.dumps({"ok": True}).encode(), RETENTION_SECONDS)
    return "done" if ok else "in_progress"
`

const pyMySQLCleanup = `"""The cleanup job (D5): run it every minute (cron, Celery beat, a
management command). It deletes expired records that are not PROCESSING,
in short batches that leave room for claims, by the database's clock."""


PRUNE = """DELETE FROM idempotency_store
 WHERE status <> 'PROCESSING' AND expires_at < NOW(6)
 ORDER BY expires_at
 LIMIT 1000"""


def prune(conn) -> int:
    """Delete expired records, 1000 at a time; returns how many."""
    total = 0
    while True:
        with conn.cursor() as c:
            n = c.execute(PRUNE)
        conn.commit()
        total += n
        if n < 1000:
            return total
`

const pyDjangoConftest = `"""pytest setup: Django settings without an ORM database (the middleware
talks to MySQL through PyMySQL), and a clean schema per test. The server
is IDEMPOTENCY_MYSQL_URL, e.g. mysql://root@127.0.0.1:3306/app."""
import os
import pathlib
import re
from urllib.parse import unquote, urlparse

import django
import pytest
from django.conf import settings

from idempotency import store

url = urlparse(os.environ.get("IDEMPOTENCY_MYSQL_URL", "mysql://root@127.0.0.1:3306/app"))
DATABASE = {"host": url.hostname, "port": url.port or 3306, "user": unquote(url.username or "root"),
            "password": unquote(url.password or ""), "database": url.path.lstrip("/")}

settings.configure(
    SECRET_KEY="tests", ALLOWED_HOSTS=["*"], ROOT_URLCONF="tests.app", DATABASES={},
    MIDDLEWARE=["tests.app.HeaderUserMiddleware", "idempotency.middleware.IdempotencyMiddleware"],
    IDEMPOTENCY_DATABASE=DATABASE,
)
django.setup()


@pytest.fixture
def db():
    assert re.fullmatch(r"\w+", DATABASE["database"]), "IDEMPOTENCY_MYSQL_URL: name a database, e.g. /app"
    admin = store.connect(**dict(DATABASE, database=None))
    with admin.cursor() as c:
        c.execute("CREATE DATABASE IF NOT EXISTS " + DATABASE["database"])
    admin.close()
    conn = store.connect(**DATABASE)
    with conn.cursor() as c:
        c.execute("DROP TABLE IF EXISTS idempotency_store, effects")
        c.execute(pathlib.Path(__file__).with_name("schema.sql").read_text())
        c.execute("CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB")
    conn.commit()
    yield conn
    conn.close()
`

const pyDjangoApp = `"""The test's Django app: a user from the X-User header, and a view of
the action that writes one row per execution through the middleware's
connection (in the transaction of the record)."""
import json

from django.http import JsonResponse
from django.urls import path

from idempotency.actions import ACTIONS

ACTION = __ACTION_STR__
GATES = {}  # name: (stalled, release) events of a request the test holds
LEASES = {}  # name: the lease of a request the test holds


class User:
    is_authenticated = True

    def __init__(self, pk):
        self.pk = pk


class Anonymous:
    is_authenticated = False


class HeaderUserMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        who = request.headers.get("X-User")
        request.user = User(who) if who else Anonymous()
        return self.get_response(request)


def view(request):
    body = json.loads(request.body)
    if request.headers.get("X-Test-Stall"):  # the test holds this request here
        stalled, release = GATES[request.headers["X-Test-Stall"]]
        LEASES[request.headers["X-Test-Stall"]] = request.idempotency_lease
        stalled.set()
        release.wait(30)
    with request.idempotency_db.cursor() as c:
        c.execute("INSERT INTO effects (body) VALUES (%s)", (json.dumps(body),))
        effect_id = c.lastrowid
    return JsonResponse({"id": effect_id, **body}, status=201)


urlpatterns = [path(ACTIONS[ACTION]["path"].lstrip("/"), view)]
`

const pyDjangoTests = `"""The scenarios of section 11 on a real MySQL/MariaDB, through Django's
test client; threads are real concurrent requests."""
import threading
import time

import pytest
from django.test import Client

from idempotency import actions, cleanup, consumer, store
from tests.app import ACTION, GATES, LEASES

PATH = actions.ACTIONS[ACTION]["path"]
BODY = {f: f"{f}-1" for f in actions.ACTIONS[ACTION]["fields"]}


def post(key, body=BODY, user="u1", stall=None):
    extra = {"HTTP_X_TEST_STALL": stall} if stall else {}
    return Client().post(PATH, body, content_type="application/json",
                         HTTP_IDEMPOTENCY_KEY=key, HTTP_X_USER=user, **extra)


def effects(db):
    db.commit()  # a fresh snapshot
    with db.cursor() as c:
        c.execute("SELECT COUNT(*) FROM effects")
        return c.fetchone()[0]


def record(db, key):
    db.commit()
    with db.cursor() as c:
        c.execute("SELECT status, fingerprint, lock_version FROM idempotency_store WHERE idempotency_key = %s",
                  (f"{ACTION}_{key}",))
        return c.fetchone()


def until(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_sequential_retry_replays_byte_for_byte(db):
    first, second = post("k1"), post("k1")
    assert first.status_code == 201 and effects(db) == 1
    assert second.status_code == 201 and second.content == first.content
    assert second["Idempotent-Replayed"] == "true"


def test_concurrent_requests_run_once(db):
    n, start, results = 8, threading.Barrier(8), []

    def one():
        start.wait()
        results.append(post("k2"))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert effects(db) == 1
    codes = sorted(r.status_code for r in results)
    assert codes.count(201) >= 1 and set(codes) <= {201, 409}, codes
    bodies = {r.content for r in results if r.status_code == 201}
    assert len(bodies) == 1


def test_other_significant_field_is_refused(db):
    if not BODY:
        pytest.skip("the action has no significant fields")
    assert post("k3").status_code == 201
    before = record(db, "k3")
    other = dict(BODY, **{next(iter(BODY)): "another"})
    assert post("k3", other).status_code == 422
    assert record(db, "k3") == before and effects(db) == 1


def test_other_volatile_field_is_replayed(db):
    first = post("k4")
    again = post("k4", dict(BODY, client_sent_at="2026-01-01T00:00:00Z"))
    assert again.status_code == 201 and again.content == first.content and effects(db) == 1


def test_stalled_holder_is_fenced_after_its_lease(db, monkeypatch):
    monkeypatch.setitem(actions.ACTIONS[ACTION], "lock_timeout", 1)
    monkeypatch.setitem(actions.ACTIONS[ACTION], "heartbeat", 0)  # a paused holder: its heartbeat stopped too
    gates = {name: (threading.Event(), threading.Event()) for name in ("old", "new")}
    GATES.update(gates)
    held = {}

    def hold(name):
        held[name] = post("k5", stall=name)
        gates[name][0].set()  # also when it fails before the gate

    old = threading.Thread(target=hold, args=("old",))
    old.start()
    assert gates["old"][0].wait(10)
    assert post("k5").status_code == 409  # the lease is live

    def lease_ended():
        db.commit()
        with db.cursor() as c:
            c.execute("SELECT locked_until <= NOW(6) FROM idempotency_store")
            return bool(c.fetchone()[0])
    until(lease_ended)
    new = threading.Thread(target=hold, args=("new",))
    new.start()
    assert gates["new"][0].wait(10) and "new" not in held  # the retry took the lease over
    assert record(db, "k5")[2] == 2
    gates["old"][1].set()
    old.join(30)
    assert held["old"].status_code == 409  # fenced: its completion refused, its write rolled back
    assert effects(db) == 0
    gates["new"][1].set()
    new.join(30)
    assert held["new"].status_code == 201 and effects(db) == 1
    assert post("k5").content == held["new"].content


def test_retry_after_expiry_is_new(db):
    first = post("k6")
    with db.cursor() as c:
        c.execute("UPDATE idempotency_store SET expires_at = NOW(6) - INTERVAL 1 SECOND")
    db.commit()
    again = post("k6")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert again.content != first.content and effects(db) == 2


def test_key_of_another_user_is_404(db):
    assert post("k7").status_code == 201
    assert post("k7", user="u2").status_code == 404
    assert effects(db) == 1


def test_unauthenticated_and_keyless_requests_are_refused(db):
    assert Client().post(PATH, BODY, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k8").status_code == 401
    assert post("").status_code == 400
    assert effects(db) == 0


def test_cleanup_deletes_expired_records_only(db):
    rows = [(f"old{i}", "COMPLETED", -1) for i in range(1001)] + [("live", "COMPLETED", 3600), ("busy", "PROCESSING", -1)]
    with db.cursor() as c:
        c.executemany("INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, expires_at) "
                      "VALUES (%s, 'u1', REPEAT('0', 64), %s, NOW(6) + INTERVAL %s SECOND)", rows)
    db.commit()
    assert cleanup.prune(db) == 1001  # more than one batch
    with db.cursor() as c:
        c.execute("SELECT idempotency_key FROM idempotency_store ORDER BY idempotency_key")
        assert [r[0] for r in c.fetchall()] == ["busy", "live"]
`

const pyDjangoConsumerTest = `

CONSUMER = __CONSUMER_STR__


def test_redelivered_message_is_handled_once(db):
    from django.conf import settings
    from idempotency import store
    conn = store.connect(**settings.IDEMPOTENCY_DATABASE)
    runs = []

    def handler(c, payload, dedup_id):  # writes its outbox row
        runs.append(dedup_id)
        with c.cursor() as cur:
            cur.execute("INSERT INTO effects (body) VALUES (%s)", (dedup_id,))

    beat = lambda: store.connect(**settings.IDEMPOTENCY_DATABASE)  # noqa: E731
    try:
        assert consumer.consume(conn, CONSUMER, "m-1", "acct-1", {}, handler, beat) == "done"
        assert consumer.consume(conn, CONSUMER, "m-1", "acct-1", {}, handler, beat) == "duplicate"
        assert consumer.consume(conn, CONSUMER, "m-2", "acct-1", {}, handler, beat) == "done"
    finally:
        conn.close()
    assert len(runs) == 2 and len(set(runs)) == 2 and effects(db) == 2
    other = store.connect(**settings.IDEMPOTENCY_DATABASE)  # another consumer instance
    try:
        assert consumer.consume(other, CONSUMER, "m-1", "acct-1", {}, handler, beat) == "duplicate"
        # Another tenant's producer may use the same message id: its own run.
        assert consumer.consume(other, CONSUMER, "m-1", "acct-2", {}, handler, beat) == "done"
    finally:
        other.close()
    assert len(runs) == 3 and effects(db) == 3


def test_message_id_with_other_fields_is_a_mismatch(db):
    from django.conf import settings
    from idempotency import store
    fields = actions.ACTIONS[CONSUMER]["fields"]
    conn = store.connect(**settings.IDEMPOTENCY_DATABASE)
    runs = []

    def handler(c, payload, dedup_id):
        runs.append(dedup_id)

    beat = lambda: store.connect(**settings.IDEMPOTENCY_DATABASE)  # noqa: E731
    first = {f: "v" for f in fields}
    try:
        assert consumer.consume(conn, CONSUMER, "m-9", "acct-1", dict(first, trace_id="t-1"), handler, beat) == "done"
        # A volatile field differs: the same message, already handled.
        assert consumer.consume(conn, CONSUMER, "m-9", "acct-1", dict(first, trace_id="t-2"), handler, beat) == "duplicate"
        if fields:  # a significant field differs: a producer bug, never acked silently
            other = dict(first, **{fields[0]: "other"})
            assert consumer.consume(conn, CONSUMER, "m-9", "acct-1", other, handler, beat) == "mismatch"
    finally:
        conn.close()
    assert len(runs) == 1
`

// pyHeartbeatTests are the heartbeat's scenarios, for both stores:
// __NOW__ is the store's clock and __MINUTE__ a minute in its SQL.
const pyHeartbeatTests = `

def lease_end(db, key):
    """The end of key's lease, as the store has it now."""
    db.commit()
    with db.cursor() as c:
        c.execute("SELECT locked_until FROM idempotency_store WHERE idempotency_key = %s", (f"{ACTION}_{key}",))
        return c.fetchone()[0]


def store_clock_past(db, instant):
    """Whether the store's clock has passed instant."""
    db.commit()
    with db.cursor() as c:
        c.execute("SELECT __NOW__ > %s", (instant,))
        return bool(c.fetchone()[0])


def hold(name, key):
    """Starts a request the view holds at its gate; returns its thread, its
    (stalled, release) events and the dict its response lands in."""
    gate = GATES[name] = (threading.Event(), threading.Event())
    held = {}

    def run():
        held[name] = post(key, stall=name)
        gate[0].set()  # also when it fails before the gate

    thread = threading.Thread(target=run)
    thread.start()
    assert gate[0].wait(10) and name not in held, held
    return thread, gate[1], held


def test_live_holder_keeps_its_lease_past_the_lock_timeout(db, monkeypatch):
    monkeypatch.setitem(actions.ACTIONS[ACTION], "lock_timeout", 2)
    monkeypatch.setitem(actions.ACTIONS[ACTION], "heartbeat", 0.25)
    holder, release, held = hold("live", "k10")
    claimed_until = lease_end(db, "k10")  # no earlier than the end of the lease as claimed
    until(lambda: store_clock_past(db, claimed_until))  # unrenewed, the lease would have ended
    retry = post("k10")
    assert retry.status_code == 409 and "Retry-After" in retry.headers  # the heartbeat kept it
    assert effects(db) == 0  # the retry did not run the action
    release.set()
    holder.join(30)
    assert held["live"].status_code == 201 and effects(db) == 1
    assert record(db, "k10")[2] == 1  # never taken over
    again = post("k10")
    assert again.content == held["live"].content and effects(db) == 1


def test_lease_lost_by_the_heartbeat_is_refused_and_the_new_holder_stands(db, monkeypatch):
    monkeypatch.setitem(actions.ACTIONS[ACTION], "heartbeat", 0.1)
    holder, release, held = hold("lost", "k11")
    lease, key = LEASES["lost"], f"{ACTION}_k11"
    with db.cursor() as c:  # another holder takes the key over: a new fencing token, its own lease
        c.execute("UPDATE idempotency_store SET lock_version = lock_version + 1, locked_until = __NOW__ + __MINUTE__ "
                  "WHERE idempotency_key = %s", (key,))
    db.commit()
    assert lease.lost.wait(10), "the heartbeat did not see its lease taken over"
    assert not lease.held()
    version, outcome = record(db, "k11")[2], b'{"by":"the new holder"}'
    with db.cursor() as c:  # the new holder's write and outcome, in one transaction
        c.execute("INSERT INTO effects (body) VALUES ('the new holder')")
    assert store.complete(db, key, "u1", version, 201, outcome, actions.RETENTION_SECONDS)
    release.set()
    holder.join(30)
    assert held["lost"].status_code == 409  # its completion refused, its write rolled back
    assert effects(db) == 1 and record(db, "k11")[2] == version
    replay = post("k11")
    assert replay.status_code == 201 and replay.content == outcome
    assert replay.headers["Idempotent-Replayed"] == "true"


def test_heartbeat_that_cannot_keep_its_lease_is_refused():
    from idempotency import heartbeat
    for lease, every in ((30, 30), (30, 45), (30, -1), (0, 0)):
        with pytest.raises(ValueError, match="lock_timeout"):
            heartbeat.check(ACTION, lease, every)
    heartbeat.check(ACTION, 30, 10)
    heartbeat.check(ACTION, 30, 0)  # off
`

// firstAction is the first action of d of one of kinds (with a route for
// http), or nil.
func firstAction(d *Document, route bool, kinds ...string) *ActionPlan {
	for i, x := range d.Actions {
		for _, k := range kinds {
			if x.Kind != k {
				continue
			}
			if route {
				if _, p, ok := strings.Cut(strings.TrimSpace(x.Trigger), " "); !ok || !strings.HasPrefix(strings.TrimSpace(p), "/") {
					continue
				}
			}
			return &d.Actions[i]
		}
	}
	return nil
}

func djangoKit(d *Document) *Kit {
	http := firstAction(d, true, "http")
	if http == nil {
		return nil // nothing for a middleware to protect: the agnostic code stays
	}
	r := kitReplacer(d)
	k := &Kit{
		Stack: "python-django",
		Intro: "A Django middleware (Django 3.2+) with PyMySQL on MySQL 8.0.16+ or MariaDB 10.2+ (InnoDB), running D2's statements as they are; Python 3.9+.",
		Run:   "IDEMPOTENCY_MYSQL_URL=mysql://root@127.0.0.1:3306/app python3 -m pytest -q",
	}
	k.Middleware = []File{
		{Path: "idempotency/actions.py", Lang: "python", Text: r.Replace(pyActionsHead) + pyActions(d)},
		{Path: "idempotency/store.py", Lang: "python", Text: pyMySQLStore},
		{Path: "idempotency/middleware.py", Lang: "python", Text: pyDjangoMiddleware},
		{Path: "idempotency/heartbeat.py", Lang: "python", Text: pyHeartbeat},
	}
	tests := strings.ReplaceAll(pyDjangoTests, "__ACTION_STR__", pyStr(http.Name)) +
		strings.NewReplacer("__NOW__", "NOW(6)", "__MINUTE__", "INTERVAL 1 MINUTE").Replace(pyHeartbeatTests)
	if c := firstAction(d, false, "consumer"); c != nil {
		k.Middleware = append(k.Middleware, File{Path: "idempotency/consumer.py", Lang: "python", Text: strings.ReplaceAll(pyDjangoConsumer, "__CONSUMER__", c.Name)})
		tests += strings.ReplaceAll(pyDjangoConsumerTest, "__CONSUMER_STR__", pyStr(c.Name))
	} else {
		tests = strings.Replace(tests, "from idempotency import actions, cleanup, consumer, store", "from idempotency import actions, cleanup, store", 1)
	}
	k.Fingerprint = []File{{Path: "idempotency/fingerprint.py", Lang: "python", Text: pyFingerprint}}
	k.Cleanup = []File{{Path: "idempotency/cleanup.py", Lang: "python", Text: pyMySQLCleanup}}
	k.Tests = []File{{Path: "tests/test_idempotency.py", Lang: "python", Text: tests}}
	k.Support = []File{
		{Path: "schema.sql", Lang: "sql", Text: mysqlDDL + "\n"},
		{Path: "conftest.py", Lang: "python", Text: pyDjangoConftest},
		{Path: "tests/app.py", Lang: "python", Text: strings.ReplaceAll(pyDjangoApp, "__ACTION_STR__", pyStr(http.Name))},
		{Path: "idempotency/__init__.py", Lang: "python", Text: "\"\"\"Idempotency for " + strings.ReplaceAll(d.Service, `"`, `'`) + ": claim, run, record, replay.\"\"\"\n"},
		{Path: "tests/__init__.py", Lang: "python", Text: ""},
	}
	return k
}

// The PostgreSQL store: D2's statements, with psycopg 3.
const pyPostgresStore = `"""The idempotency record on PostgreSQL (psycopg 3), section D2: one
INSERT ... ON CONFLICT DO NOTHING creates the record if absent; the
decision on an existing record is taken under its row lock (SELECT ...
FOR UPDATE); every instant is now(), the database's clock."""
import math
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from .fingerprint import same

SECONDS = "%s * interval '1 second'"


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=False)


` + pyClaim + `

def claim(conn, key: str, scope: str, fp: str, lease: int, retention: int) -> Claim:
    """Create the record if absent, or decide on the one there."""
    with conn.transaction(), conn.cursor() as c:
        c.execute("SELECT 1 FROM idempotency_store WHERE idempotency_key = %s AND user_id <> %s LIMIT 1",
                  (key, scope))
        if c.fetchone():
            return Claim("other_scope")
        c.execute(f"""
            INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status,
                                           lock_version, locked_until, expires_at)
            VALUES (%s, %s, %s, 'PROCESSING', 1, now() + {SECONDS}, now() + {SECONDS})
            ON CONFLICT (idempotency_key, user_id) DO NOTHING
            RETURNING lock_version""", (key, scope, fp, lease, retention))
        if c.fetchone():
            return Claim("run", lock_version=1)
        c.execute("""
            SELECT fingerprint, status, lock_version, locked_until, expires_at,
                   response_code, response_raw, now()
              FROM idempotency_store
             WHERE idempotency_key = %s AND user_id = %s
               FOR UPDATE""", (key, scope))
        rfp, status, version, locked_until, expires_at, code, raw, db_now = c.fetchone()
        if expires_at <= db_now:  # an expired key is a new request, never a replay
            c.execute(f"""
                UPDATE idempotency_store
                   SET fingerprint = %s, status = 'PROCESSING', lock_version = lock_version + 1,
                       locked_until = now() + {SECONDS}, expires_at = now() + {SECONDS},
                       response_code = NULL, response_body = NULL, response_raw = NULL, completed_at = NULL
                 WHERE idempotency_key = %s AND user_id = %s AND expires_at <= now()""",
                      (fp, lease, retention, key, scope))
            return Claim("run", lock_version=version + 1)
        if not same(rfp, fp):
            return Claim("mismatch")
        if status != "PROCESSING":
            return Claim("replay", code=code, body=bytes(raw or b""))
        if locked_until is not None and locked_until > db_now:
            wait = math.ceil((locked_until - db_now).total_seconds())
            return Claim("in_progress", retry_after=max(1, wait))
        # The lease ended: take it over by compare-and-swap on lock_version.
        c.execute(f"""
            UPDATE idempotency_store
               SET lock_version = lock_version + 1, locked_until = now() + {SECONDS}
             WHERE idempotency_key = %s AND user_id = %s AND status NOT IN ('COMPLETED', 'FAILED')
               AND (locked_until IS NULL OR locked_until <= now()) AND lock_version = %s
            RETURNING lock_version""", (lease, key, scope, version))
        row = c.fetchone()
        if row:
            return Claim("run", lock_version=row[0])
        return Claim("in_progress", retry_after=1)


def complete(conn, key: str, scope: str, version: int, code: int, body: bytes, retention: int) -> bool:
    """Record the outcome, fenced by the holder's lock_version, in the
    transaction of the action's own writes: commit both, or (lease lost)
    roll both back and return False."""
    with conn.cursor() as c:
        c.execute(f"""
            UPDATE idempotency_store
               SET status = 'COMPLETED', response_code = %s, response_raw = %s,
                   response_body = %s, completed_at = now(), locked_until = NULL,
                   expires_at = now() + {SECONDS}
             WHERE idempotency_key = %s AND user_id = %s AND lock_version = %s
               AND status NOT IN ('COMPLETED', 'FAILED')""",
                  (code, body, Jsonb({"content_type": "application/json"}), retention, key, scope, version))
        if c.rowcount != 1:
            conn.rollback()
            return False
    conn.commit()
    return True


def renew(conn, key: str, scope: str, version: int, lease: float) -> bool:
    """The heartbeat: extend the holder's lease to now() + lease, fenced
    by its lock_version; False when the lease is no longer the holder's.
    conn is the heartbeat's own connection."""
    with conn.cursor() as c:
        c.execute(f"""
            UPDATE idempotency_store SET locked_until = now() + {SECONDS}
             WHERE idempotency_key = %s AND user_id = %s AND status NOT IN ('COMPLETED', 'FAILED')
               AND lock_version = %s""", (lease, key, scope, version))
        held = c.rowcount == 1
    conn.commit()
    return held


def release(conn, key: str, scope: str, version: int) -> None:
    """A transient failure: undo the action's writes and end the lease at
    once, keeping the record, so that a retry re-drives it."""
    conn.rollback()
    with conn.cursor() as c:
        c.execute("""
            UPDATE idempotency_store SET locked_until = now()
             WHERE idempotency_key = %s AND user_id = %s AND lock_version = %s
               AND status NOT IN ('COMPLETED', 'FAILED')""", (key, scope, version))
    conn.commit()
`

const pyFastAPIDependency = `"""A FastAPI dependency: claim, run the route, record, replay (sections 4
and D3). The database is IDEMPOTENCY_DATABASE_URL (a libpq URL). Use:

    app = FastAPI(); install(app)
    app.dependency_overrides[current_user] = your_auth_dependency

    @app.post("/path")
    def route(idem: Idempotency = Depends(idempotent("action"))):
        ...  # write through idem.conn: one transaction with the record
        return idem.respond(201, {...})
"""
import hashlib
import json
import os
import re

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from . import store
from .actions import ACTIONS, RETENTION_SECONDS
from . import heartbeat
from .fingerprint import fingerprint
from .heartbeat import Heartbeat

KEY = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def current_user() -> str:
    """The authenticated user's id, which scopes every key: override it
    with your authentication dependency."""
    raise HTTPException(401, "authentication required: the key is scoped by the user")


def webhook_account() -> str:
    """The account a webhook comes from, which scopes its keys, once its
    signature is verified (e.g. stripe.Webhook.construct_event): override
    it with your verification."""
    raise HTTPException(401, "unverified webhook: verify its signature first")


class Refused(Exception):
    """Ends the request with response: a replay or a refusal."""

    def __init__(self, response: Response):
        self.response = response


def _error(status, message, **headers):
    return Refused(JSONResponse({"error": message}, status_code=status, headers=headers))


def install(app: FastAPI) -> None:
    async def refused(request, exc: Refused):
        return exc.response
    app.add_exception_handler(Refused, refused)


class Idempotency:
    """The claimed key: its record's connection (write the action's rows
    through it), its lease (kept alive by a heartbeat while the route runs:
    check lease.held() before an effect outside the record's transaction)
    and respond(), which records the outcome, fenced."""

    def __init__(self, conn, action, key, scope, version, body, lease):
        self.conn, self.action, self.key, self.scope = conn, action, key, scope
        self.version, self.body, self.done, self.lease = version, body, False, lease

    def respond(self, status: int, payload) -> Response:
        raw = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self.lease.stop()  # before completing: no renewal races the fenced update
        if not store.complete(self.conn, self.key, self.scope, self.version, status, raw, RETENTION_SECONDS):
            self.done = True
            raise _error(409, "the lease on this key was lost to a retry: its outcome is the retry's")
        self.done = True
        return Response(raw, status_code=status, media_type="application/json")


def idempotent(action: str):
    """The dependency protecting action (a name of ACTIONS): an HTTP
    action's key is the caller's Idempotency-Key, scoped by current_user;
    a webhook's is its event id, scoped by webhook_account."""

    webhook = ACTIONS[action]["kind"] == "webhook"
    heartbeat.check(action, ACTIONS[action]["lock_timeout"], ACTIONS[action]["heartbeat"])

    async def dependency(request: Request, scope: str = Depends(webhook_account if webhook else current_user)):
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            raise _error(400, "the body is not JSON")
        if webhook:  # the sender's event id: identical on every resend
            event = body.get(ACTIONS[action]["key_field"]) if isinstance(body, dict) else None
            if not event:
                raise _error(400, f"the event has no {ACTIONS[action]['key_field']}")
            intent = hashlib.sha256(str(event).encode("utf-8")).hexdigest()
        else:
            intent = request.headers.get("Idempotency-Key", "")
            if not KEY.fullmatch(intent):
                raise _error(400, "Idempotency-Key header required: 1 to 200 of A-Z a-z 0-9 _ . : -, "
                                  "one per intent, the same on every retry")
        # A webhook's key holds its sender's account: senders number their
        # events independently, and one's event must never answer another's.
        key = f"{scope}_{action}_{intent}" if webhook else f"{action}_{intent}"
        conn = await run_in_threadpool(store.connect, os.environ["IDEMPOTENCY_DATABASE_URL"])
        try:
            c = await run_in_threadpool(store.claim, conn, key, scope, fingerprint(action, body),
                                        ACTIONS[action]["lock_timeout"], RETENTION_SECONDS)
            if c.outcome == "other_scope":
                raise _error(404, "no such idempotency key")
            if c.outcome == "mismatch":
                raise _error(422, "this Idempotency-Key was used with other request fields: use a new key")
            if c.outcome == "in_progress":
                raise _error(409, "a request with this key is in progress", **{"Retry-After": str(c.retry_after)})
            if c.outcome == "replay":
                raise Refused(Response(c.body, status_code=c.code, media_type="application/json",
                                       headers={"Idempotent-Replayed": "true"}))
            url = os.environ["IDEMPOTENCY_DATABASE_URL"]
            lease = Heartbeat(lambda: store.connect(url), key, scope, c.lock_version,
                              ACTIONS[action]["lock_timeout"], ACTIONS[action]["heartbeat"]).start()
            idem = Idempotency(conn, action, key, scope, c.lock_version, body, lease)
            try:
                yield idem
            finally:
                await run_in_threadpool(lease.stop)
                if not idem.done:  # the route failed: a transient error, re-driven by a retry
                    await run_in_threadpool(store.release, conn, key, scope, c.lock_version)
        finally:
            conn.close()

    return dependency
`

const pyStripe = `"""The Stripe call of a protected action (section 7): its Idempotency-Key
is derived from the action's key, the step and the attempt, never random,
so a retry after a lost response re-sends the same one and Stripe replays
the first result instead of charging again."""
import hashlib


def stripe_idempotency_key(key: str, step: str = "__STEP__", attempt: int = 1) -> str:
    """{key}_{step}_{attempt}, hashed when longer than Stripe's 255."""
    ref = f"{key}_{step}_{attempt}"
    return ref if len(ref) <= 255 else hashlib.sha256(ref.encode("utf-8")).hexdigest()


def create_payment_intent(stripe, idem, step: str = "__STEP__", **params):
    """stripe.PaymentIntent.create with the derived key; metadata carries
    the action's key for reconciliation (section 7)."""
    return stripe.PaymentIntent.create(
        **params, confirm=True,
        idempotency_key=stripe_idempotency_key(idem.key, step),
        metadata={"idempotency_key": idem.key},
    )
`

const pyPostgresCleanup = `"""The cleanup job (D5): run it every minute (cron, a scheduler). It
deletes expired records that are not PROCESSING, in short batches, by the
database's clock."""

PRUNE = """DELETE FROM idempotency_store
WHERE ctid IN (SELECT ctid FROM idempotency_store
               WHERE status <> 'PROCESSING' AND expires_at < now()
               ORDER BY expires_at LIMIT 1000)"""


def prune(conn) -> int:
    """Delete expired records, 1000 at a time; returns how many."""
    total = 0
    while True:
        with conn.cursor() as c:
            c.execute(PRUNE)
            n = c.rowcount
        conn.commit()
        total += n
        if n < 1000:
            return total
`

const pyFastAPIConftest = `"""pytest setup: a clean schema per test on IDEMPOTENCY_DATABASE_URL, e.g.
postgresql://user@127.0.0.1:5432/app (libpq URL)."""
import os
import pathlib

import pytest

from idempotency import store

URL = os.environ.setdefault("IDEMPOTENCY_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/app")


@pytest.fixture
def db():
    conn = store.connect(URL)
    with conn.cursor() as c:
        c.execute("DROP TABLE IF EXISTS idempotency_store, effects")
        c.execute(pathlib.Path(__file__).with_name("schema.sql").read_text())
        c.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
    conn.commit()
    yield conn
    conn.close()
`

const pyFastAPIApp = `"""The test's FastAPI app: a user from the X-User header, a fake Stripe
that honours Idempotency-Key, and a route of the action that charges and
writes one row per execution through the record's connection."""
import json
import threading

from fastapi import Depends, FastAPI, Header, HTTPException

from idempotency.actions import ACTIONS
from idempotency.dependency import Idempotency, current_user, idempotent, install
from idempotency.payments import create_payment_intent

ACTION = __ACTION_STR__
GATES = {}  # name: (stalled, release) events of a request the test holds
LEASES = {}  # name: the lease of a request the test holds


class FakeStripe:
    """Stripe's idempotency, in memory: the same Idempotency-Key returns
    the first PaymentIntent; lose_next drops the response of a call that
    charged (a timeout after Stripe did its work)."""

    def __init__(self):
        self.charges, self.keys, self.lose_next, self.lock = {}, [], False, threading.Lock()
        self.PaymentIntent = self

    def create(self, idempotency_key, **params):
        with self.lock:
            self.keys.append(idempotency_key)
            if idempotency_key not in self.charges:
                self.charges[idempotency_key] = {"id": f"pi_{len(self.charges) + 1}", "status": "succeeded"}
            if self.lose_next:
                self.lose_next = False
                raise TimeoutError("the response from Stripe was lost")
            return self.charges[idempotency_key]


stripe = FakeStripe()


def get_stripe():
    return stripe


def header_user(x_user: str = Header(None)) -> str:
    if not x_user:
        raise HTTPException(401, "authentication required")
    return x_user


app = FastAPI()
install(app)
app.dependency_overrides[current_user] = header_user


@app.post(ACTIONS[ACTION]["path"])
def route(idem: Idempotency = Depends(idempotent(ACTION)), stripe=Depends(get_stripe),
          x_test_stall: str = Header(None)):
    if x_test_stall:  # the test holds this request here
        stalled, release = GATES[x_test_stall]
        LEASES[x_test_stall] = idem.lease
        stalled.set()
        release.wait(30)
    params = {f: idem.body.get(f) for f in ACTIONS[ACTION]["fields"]}
    intent = create_payment_intent(stripe, idem, **params)
    with idem.conn.cursor() as c:
        c.execute("INSERT INTO effects (body) VALUES (%s) RETURNING id", (json.dumps(params),))
        effect_id = c.fetchone()[0]
    return idem.respond(201, {"id": effect_id, "payment_intent": intent["id"], **params})
`

const pyFastAPITests = `"""The scenarios of section 11 on a real PostgreSQL, through FastAPI's
test client; threads are real concurrent requests."""
import threading
import time

import pytest
from fastapi.testclient import TestClient

from idempotency import actions, cleanup, store
from tests.app import ACTION, GATES, LEASES, app, stripe

PATH = actions.ACTIONS[ACTION]["path"]
BODY = {f: f"{f}-1" for f in actions.ACTIONS[ACTION]["fields"]}


def post(key, body=BODY, user="u1", stall=None):
    headers = {"Idempotency-Key": key, **({"X-User": user} if user else {}), **({"X-Test-Stall": stall} if stall else {})}
    return TestClient(app, raise_server_exceptions=False).post(PATH, json=body, headers=headers)


def effects(db):
    db.commit()
    with db.cursor() as c:
        c.execute("SELECT count(*) FROM effects")
        return c.fetchone()[0]


def record(db, key):
    db.commit()
    with db.cursor() as c:
        c.execute("SELECT status, fingerprint, lock_version FROM idempotency_store WHERE idempotency_key = %s",
                  (f"{ACTION}_{key}",))
        return c.fetchone()


def until(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def fresh_stripe():
    stripe.__init__()


def test_sequential_retry_replays_byte_for_byte(db):
    first, second = post("k1"), post("k1")
    assert first.status_code == 201 and effects(db) == 1
    assert second.status_code == 201 and second.content == first.content
    assert second.headers["Idempotent-Replayed"] == "true"
    assert len(stripe.charges) == 1


def test_concurrent_requests_run_once(db):
    n, start, results = 8, threading.Barrier(8), []

    def one():
        start.wait()
        results.append(post("k2"))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert effects(db) == 1 and len(stripe.keys) == 1
    codes = sorted(r.status_code for r in results)
    assert codes.count(201) >= 1 and set(codes) <= {201, 409}, codes
    assert len({r.content for r in results if r.status_code == 201}) == 1


def test_other_significant_field_is_refused(db):
    if not BODY:
        pytest.skip("the action has no significant fields")
    assert post("k3").status_code == 201
    before = record(db, "k3")
    other = dict(BODY, **{next(iter(BODY)): "another"})
    assert post("k3", other).status_code == 422
    assert record(db, "k3") == before and effects(db) == 1


def test_other_volatile_field_is_replayed(db):
    first = post("k4")
    again = post("k4", dict(BODY, client_sent_at="2026-01-01T00:00:00Z"))
    assert again.status_code == 201 and again.content == first.content and effects(db) == 1


def test_stalled_holder_is_fenced_after_its_lease(db, monkeypatch):
    monkeypatch.setitem(actions.ACTIONS[ACTION], "lock_timeout", 1)
    monkeypatch.setitem(actions.ACTIONS[ACTION], "heartbeat", 0)  # a paused holder: its heartbeat stopped too
    gates = {name: (threading.Event(), threading.Event()) for name in ("old", "new")}
    GATES.update(gates)
    held = {}

    def hold(name):
        held[name] = post("k5", stall=name)
        gates[name][0].set()  # also when it fails before the gate

    old = threading.Thread(target=hold, args=("old",))
    old.start()
    assert gates["old"][0].wait(10)
    assert post("k5").status_code == 409  # the lease is live

    def lease_ended():
        db.commit()
        with db.cursor() as c:
            c.execute("SELECT locked_until <= now() FROM idempotency_store")
            return bool(c.fetchone()[0])
    until(lease_ended)
    new = threading.Thread(target=hold, args=("new",))
    new.start()
    assert gates["new"][0].wait(10) and "new" not in held  # the retry took the lease over
    assert record(db, "k5")[2] == 2
    gates["old"][1].set()
    old.join(30)
    assert held["old"].status_code == 409  # fenced: its completion refused, its write rolled back
    assert effects(db) == 0
    gates["new"][1].set()
    new.join(30)
    assert held["new"].status_code == 201 and effects(db) == 1 and len(stripe.charges) == 1
    assert post("k5").content == held["new"].content


def test_lost_provider_response_is_resent_with_the_same_reference(db):
    stripe.lose_next = True
    assert post("k9").status_code == 500  # the charge happened; its response was lost
    assert effects(db) == 0
    retry = post("k9")
    assert retry.status_code == 201 and effects(db) == 1
    assert len(stripe.keys) == 2 and stripe.keys[0] == stripe.keys[1]
    assert len(stripe.charges) == 1


def test_retry_after_expiry_is_new(db):
    first = post("k6")
    with db.cursor() as c:
        c.execute("UPDATE idempotency_store SET expires_at = now() - interval '1 second'")
    db.commit()
    again = post("k6")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    assert again.content != first.content and effects(db) == 2


def test_key_of_another_user_is_404(db):
    assert post("k7").status_code == 201
    assert post("k7", user="u2").status_code == 404
    assert effects(db) == 1


def test_unauthenticated_and_keyless_requests_are_refused(db):
    assert post("k8", user=None).status_code == 401
    assert post("").status_code == 400
    assert effects(db) == 0


def test_cleanup_deletes_expired_records_only(db):
    rows = [(f"old{i}", "COMPLETED", -1) for i in range(1001)] + [("live", "COMPLETED", 3600), ("busy", "PROCESSING", -1)]
    with db.cursor() as c:
        c.executemany("INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, expires_at) "
                      "VALUES (%s, 'u1', repeat('0', 64), %s, now() + %s * interval '1 second')", rows)
    db.commit()
    assert cleanup.prune(db) == 1001  # more than one batch
    with db.cursor() as c:
        c.execute("SELECT idempotency_key FROM idempotency_store ORDER BY idempotency_key")
        assert [r[0] for r in c.fetchall()] == ["busy", "live"]
`

const pyFastAPIWebhookApp = `

WEBHOOK = __WEBHOOK_STR__
app.dependency_overrides[webhook_account] = lambda: "acct_test"  # as if its signature was verified


@app.post(ACTIONS[WEBHOOK]["path"])
def webhook(idem: Idempotency = Depends(idempotent(WEBHOOK))):
    with idem.conn.cursor() as c:
        c.execute("INSERT INTO effects (body) VALUES (%s) RETURNING id", (json.dumps(idem.body),))
        effect_id = c.fetchone()[0]
    return idem.respond(200, {"effect": effect_id})
`

const pyFastAPIWebhookTest = `

def test_resent_webhook_is_handled_once(db):
    from tests.app import WEBHOOK
    path, field = actions.ACTIONS[WEBHOOK]["path"], actions.ACTIONS[WEBHOOK]["key_field"]
    event = {field: "evt_1", **{f: f"{f}-1" for f in actions.ACTIONS[WEBHOOK]["fields"]}}
    client = TestClient(app, raise_server_exceptions=False)
    first, resent = client.post(path, json=event), client.post(path, json=event)
    assert first.status_code == 200 and resent.content == first.content
    assert resent.headers["Idempotent-Replayed"] == "true" and effects(db) == 1
    assert client.post(path, json=dict(event, **{field: "evt_2"})).status_code == 200 and effects(db) == 2
    assert client.post(path, json={}).status_code == 400
    # Another sender's event with the same id: its own run, neither a replay nor a 404.
    from idempotency.dependency import webhook_account
    app.dependency_overrides[webhook_account] = lambda: "acct_other"
    try:
        other = client.post(path, json=event)
    finally:
        app.dependency_overrides[webhook_account] = lambda: "acct_test"
    assert other.status_code == 200 and "Idempotent-Replayed" not in other.headers and effects(db) == 3
`

func fastapiKit(d *Document) *Kit {
	http := firstAction(d, true, "http")
	if http == nil {
		return nil
	}
	r := kitReplacer(d)
	step := "charge"
	for _, ref := range http.Refs {
		step = ref.Step
	}
	k := &Kit{
		Stack: "python-fastapi",
		Intro: "A FastAPI dependency (FastAPI 0.90+) with psycopg 3 on PostgreSQL, running D2's statements as they are, and the Stripe call with its derived Idempotency-Key; Python 3.9+.",
		Run:   "IDEMPOTENCY_DATABASE_URL=postgresql://user@127.0.0.1:5432/app python3 -m pytest -q",
	}
	k.Middleware = []File{
		{Path: "idempotency/actions.py", Lang: "python", Text: r.Replace(pyActionsHead) + pyActions(d)},
		{Path: "idempotency/store.py", Lang: "python", Text: pyPostgresStore},
		{Path: "idempotency/dependency.py", Lang: "python", Text: pyFastAPIDependency},
		{Path: "idempotency/heartbeat.py", Lang: "python", Text: pyHeartbeat},
		{Path: "idempotency/payments.py", Lang: "python", Text: strings.ReplaceAll(pyStripe, "__STEP__", step)},
	}
	k.Fingerprint = []File{{Path: "idempotency/fingerprint.py", Lang: "python", Text: pyFingerprint}}
	k.Cleanup = []File{{Path: "idempotency/cleanup.py", Lang: "python", Text: pyPostgresCleanup}}
	app := strings.ReplaceAll(pyFastAPIApp, "__ACTION_STR__", pyStr(http.Name))
	tests := pyFastAPITests + strings.NewReplacer("__NOW__", "now()", "__MINUTE__", "interval '1 minute'").Replace(pyHeartbeatTests)
	if w := firstAction(d, true, "webhook"); w != nil {
		app = strings.Replace(app, "current_user, idempotent, install", "current_user, idempotent, install, webhook_account", 1)
		app += strings.ReplaceAll(pyFastAPIWebhookApp, "__WEBHOOK_STR__", pyStr(w.Name))
		tests += pyFastAPIWebhookTest
	}
	k.Tests = []File{{Path: "tests/test_idempotency.py", Lang: "python", Text: tests}}
	k.Support = []File{
		{Path: "schema.sql", Lang: "sql", Text: referenceDDL() + "\n"},
		{Path: "conftest.py", Lang: "python", Text: pyFastAPIConftest},
		{Path: "tests/app.py", Lang: "python", Text: app},
		{Path: "idempotency/__init__.py", Lang: "python", Text: "\"\"\"Idempotency for " + strings.ReplaceAll(d.Service, `"`, `'`) + ": claim, run, record, replay.\"\"\"\n"},
		{Path: "tests/__init__.py", Lang: "python", Text: ""},
	}
	return k
}
