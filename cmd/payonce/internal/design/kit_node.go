package design

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// The TypeScript kit: an Express 4 middleware on DynamoDB (the AWS SDK v3
// client), its fingerprint utility, the cleanup job, an SQS consumer when
// the design has a consumer action, and tests under node's own test
// runner. src/config.ts carries the document's decisions (per action its
// significant fields and lock timeout, the retention, the skew buffer);
// the other files implement D2's statements and read it.

func init() {
	registerKit([]string{"typescript-express"}, nodeKit)
}

// nodeKit returns the kit of a TypeScript (or JavaScript) Express service
// on DynamoDB with at least one HTTP action, or nil.
func nodeKit(d *Document) *Kit {
	s := d.Answers.Stack
	lang := strings.ToLower(s.Language)
	if !(strings.Contains(lang, "typescript") || strings.Contains(lang, "javascript") || strings.Contains(lang, "node")) ||
		!strings.Contains(strings.ToLower(s.Framework), "express") || d.Store != StoreDynamo {
		return nil
	}
	var http, consumer *ActionPlan
	for i := range d.Actions {
		x := &d.Actions[i]
		if x.Kind == "http" && http == nil {
			http = x
		}
		if x.Kind != "http" && consumer == nil {
			consumer = x
		}
	}
	if http == nil {
		return nil
	}
	fill := func(s string) string {
		s = strings.ReplaceAll(s, "{{HTTP}}", tsIdent(http.Name))
		if consumer != nil {
			s = strings.ReplaceAll(s, "{{CONSUMER}}", tsIdent(consumer.Name))
		}
		return s
	}
	k := &Kit{
		Stack: "typescript-express",
		Intro: "TypeScript on Node (20+), Express 4 and the AWS SDK v3 DynamoDB client (@aws-sdk/client-dynamodb); the table and statements are those of D2. " +
			"src/config.ts holds this document's decisions; app.post(route, idempotent({...}), handler) protects an action; " +
			"the handler puts its own DynamoDB writes in res.locals.idempotency.writes to commit them with the response in one TransactWriteItems.",
		Middleware: []File{
			{"src/config.ts", "typescript", nodeConfig(d)},
			{"src/store.ts", "typescript", tsStore},
			{"src/idempotency.ts", "typescript", tsMiddleware},
		},
		Fingerprint: []File{{"src/fingerprint.ts", "typescript", tsFingerprint}},
		Cleanup:     []File{{"src/cleanup.ts", "typescript", tsCleanup}},
		Tests:       []File{{"test/kit.test.ts", "typescript", fill(tsTests)}},
		Support: []File{
			{"test/support.ts", "typescript", fill(tsSupport)},
			{"package.json", "json", tsPackageJSON},
			{"tsconfig.json", "json", tsConfigJSON},
		},
		Run: "npm install && DYNAMO_ENDPOINT=http://127.0.0.1:8000 npm test (DynamoDB Local, dynalite or a test account's endpoint)",
	}
	if consumer != nil {
		k.Middleware = append(k.Middleware, File{"src/sqsConsumer.ts", "typescript", tsSQSConsumer})
		k.Tests = append(k.Tests, File{"test/sqs.test.ts", "typescript", fill(tsSQSTests)})
	}
	return k
}

var tsIdentRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// tsIdent is name as a TypeScript property access (actions.<name>), or an
// index (actions["<name>"]) when it is not an identifier.
func tsIdent(name string) string {
	if tsIdentRE.MatchString(name) {
		return name
	}
	return "[" + tsString(name) + "]"
}

// tsString is s as a TypeScript string literal.
func tsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func tsStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tsString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// tsMs is a duration in ms as a TypeScript number literal (30_000).
func tsMs(ms int64) string {
	s := fmt.Sprint(ms)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte('_')
		}
		b.WriteRune(c)
	}
	return b.String()
}

var payloadField = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// nodeConfig is src/config.ts: the document's decisions.
func nodeConfig(d *Document) string {
	var b strings.Builder
	b.WriteString(`// The design's decisions for ` + strings.ReplaceAll(d.Service, "\n", " ") + ` (sections 1 to 4 of the design
// document): per action its significant fields and lock timeout, and the
// key retention. Change them there, then here.

export interface ActionConfig {
  /** The action's name, the middle part of its keys: {scope}_{name}_{intent}. */
  name: string;
  /** Significant fields: the fingerprint covers these and nothing else. */
  fields: readonly string[];
  /** Lease (lock timeout): 3x the action's p99, at least 30 s. */
  leaseMs: number;
  /** A consumer's key: these payload fields (a business id), hashed. */
  identifying?: readonly string[];
}

export const actions = {
`)
	for _, x := range d.Actions {
		fmt.Fprintf(&b, "  // %s %s: p99 %s, lock timeout %s\n", x.Kind, strings.ReplaceAll(orDash(x.Trigger), "\n", " "), strings.ReplaceAll(x.Duration, "\n", " "), human(x.LockTimeout))
		fmt.Fprintf(&b, "  %s: { name: %s, fields: %s, leaseMs: %s", tsKey(x.Name), tsString(x.Name), tsStrings(x.Fields), tsMs(x.LockTimeout.Milliseconds()))
		if x.Kind != "http" {
			var ids []string
			for _, f := range x.IdentifyingFields {
				if payloadField.MatchString(f) {
					ids = append(ids, f)
				}
			}
			if len(ids) == 0 {
				ids = x.Fields
			}
			fmt.Fprintf(&b, ", identifying: %s", tsStrings(ids))
		}
		b.WriteString(" },\n")
	}
	fmt.Fprintf(&b, `} as const satisfies Record<string, ActionConfig>;

/** Retention (%s): a key older than this is new again; %s. */
export const retentionMs = %s;

/** The DynamoDB table of D2 (partition key pk, TTL attribute purge). */
export const tableName = "idempotency";

/**
 * DynamoDB expressions have no clock: the application's decides every
 * lease end and expiry. skewMs is the bound the deployment promises on its
 * hosts' clock differences; a lease is taken over only once it ended that
 * long ago by the claimant's clock.
 */
export const skewMs = 2_000;
`, human(d.Retention), strings.ReplaceAll(strings.ReplaceAll(d.RetentionReason, "*/", "* /"), "\n", " "), tsMs(d.Retention.Milliseconds()))
	return b.String()
}

// tsKey is name as an object literal key.
func tsKey(name string) string {
	if tsIdentRE.MatchString(name) {
		return name
	}
	return tsString(name)
}

// src/fingerprint.ts
const tsFingerprint = `import { createHash, timingSafeEqual } from "node:crypto";
import type { ActionConfig } from "./config";

/**
 * fingerprint hashes an action's significant fields, and only those: each
 * as its name, a type tag and its canonical value, length-prefixed, in the
 * order of the sorted names, then SHA-256 (64 hex chars). Volatile fields
 * (timestamps, trace ids, the key, headers, field order, whitespace) never
 * change it; any significant field that differs does.
 */
export function fingerprint(action: ActionConfig, body: unknown): string {
  const src = (body ?? {}) as Record<string, unknown>;
  const h = createHash("sha256");
  h.update(action.name);
  for (const name of [...action.fields].sort()) {
    const v = Object.prototype.hasOwnProperty.call(src, name) ? src[name] : undefined;
    frame(h, name);
    frame(h, tag(v));
    frame(h, v === undefined ? "" : canonical(v));
  }
  return h.digest("hex");
}

/** sameFingerprint compares two fingerprints in constant time. */
export function sameFingerprint(a: string, b: string): boolean {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return x.length === y.length && timingSafeEqual(x, y);
}

function frame(h: ReturnType<typeof createHash>, s: string): void {
  const b = Buffer.from(s, "utf8");
  const n = Buffer.alloc(8);
  n.writeBigUInt64BE(BigInt(b.length));
  h.update(n);
  h.update(b);
}

function tag(v: unknown): string {
  if (v === undefined) return "absent";
  if (v === null) return "null";
  return Array.isArray(v) ? "array" : typeof v;
}

/** canonical is JSON with object keys sorted, at every depth. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return "{" + Object.keys(o).sort().map((k) => JSON.stringify(k) + ":" + canonical(o[k])).join(",") + "}";
  }
  return JSON.stringify(v) ?? "null";
}
`

// src/store.ts
const tsStore = `import {
  ConditionalCheckFailedException, DynamoDBClient, GetItemCommand, PutItemCommand,
  TransactWriteItemsCommand, TransactionCanceledException, UpdateItemCommand,
  type AttributeValue, type TransactWriteItem,
} from "@aws-sdk/client-dynamodb";
import { sameFingerprint } from "./fingerprint";
import { retentionMs as defaultRetentionMs, skewMs as defaultSkewMs, tableName } from "./config";

// The record of D2: one item per (scope, key), pk = r#<scope>#<key>:
// fp, st (PROCESSING | COMPLETED), v (lock version), lu (lease end, ms),
// ea (expires at, ms), purge (TTL, epoch s), code, ctype, body (B).

export interface StoreOptions {
  client: DynamoDBClient;
  table?: string;
  retentionMs?: number;
  skewMs?: number;
  /** The application clock in ms (Date.now); DynamoDB has none. */
  clock?: () => number;
}

export interface Stored { code: number; ctype: string; body: Uint8Array }

export type Claim =
  | { kind: "claimed"; version: number }
  | { kind: "completed"; response: Stored }
  | { kind: "in_progress"; retryAfterMs: number }
  | { kind: "mismatch" };

/** PURGE_MARGIN_S: the TTL attribute lags ea, and DynamoDB deletes late anyway. */
const PURGE_MARGIN_S = 3600;

export class IdempotencyStore {
  readonly client: DynamoDBClient;
  readonly table: string;
  readonly retentionMs: number;
  readonly skewMs: number;
  readonly clock: () => number;

  constructor(o: StoreOptions) {
    this.client = o.client;
    this.table = o.table ?? tableName;
    this.retentionMs = o.retentionMs ?? defaultRetentionMs;
    this.skewMs = o.skewMs ?? defaultSkewMs;
    this.clock = o.clock ?? Date.now;
  }

  static pk(scope: string, key: string): string {
    return "r#" + scope + "#" + key;
  }

  /**
   * claim creates the record if absent (PutItem, attribute_not_exists),
   * else decides on the record read with a strongly consistent GetItem:
   * expired -> new request; other fingerprint -> mismatch; COMPLETED ->
   * replay; PROCESSING with a live lease -> in progress; with a lease
   * ended more than skewMs ago -> take over with v + 1.
   */
  async claim(scope: string, key: string, fp: string, leaseMs: number): Promise<Claim> {
    const pk = IdempotencyStore.pk(scope, key);
    for (let attempt = 0; attempt < 5; attempt++) {
      const now = this.clock();
      const fresh = this.item(pk, scope, key, fp, 1, now, leaseMs);
      if (await this.conditional(new PutItemCommand({ TableName: this.table, Item: fresh, ConditionExpression: "attribute_not_exists(pk)" }))) {
        return { kind: "claimed", version: 1 };
      }
      const got = await this.client.send(new GetItemCommand({ TableName: this.table, Key: { pk: { S: pk } }, ConsistentRead: true }));
      const it = got.Item;
      if (!it) continue; // deleted in between: create again
      const v = Number(it.v.N);
      const ea = Number(it.ea.N);
      if (ea <= now) {
        // Past expires_at: a new request, even if DynamoDB has not deleted it yet.
        const next = this.item(pk, scope, key, fp, v + 1, now, leaseMs);
        if (await this.conditional(new PutItemCommand({
          TableName: this.table, Item: next,
          ConditionExpression: "v = :seen AND ea = :seen_ea",
          ExpressionAttributeValues: { ":seen": { N: String(v) }, ":seen_ea": { N: String(ea) } },
        }))) return { kind: "claimed", version: v + 1 };
        continue;
      }
      if (!sameFingerprint(it.fp.S ?? "", fp)) return { kind: "mismatch" };
      if (it.st.S === "COMPLETED") {
        return { kind: "completed", response: { code: Number(it.code.N), ctype: it.ctype?.S ?? "", body: it.body?.B ?? new Uint8Array() } };
      }
      const lu = Number(it.lu.N);
      if (lu > now - this.skewMs) return { kind: "in_progress", retryAfterMs: lu + this.skewMs - now };
      if (await this.conditional(new UpdateItemCommand({
        TableName: this.table, Key: { pk: { S: pk } },
        UpdateExpression: "SET v = :next, lu = :lu",
        ConditionExpression: "st = :processing AND v = :seen AND lu < :now_minus_skew",
        ExpressionAttributeValues: {
          ":next": { N: String(v + 1) }, ":lu": { N: String(now + leaseMs) }, ":processing": { S: "PROCESSING" },
          ":seen": { N: String(v) }, ":now_minus_skew": { N: String(now - this.skewMs) },
        },
      }))) return { kind: "claimed", version: v + 1 };
    }
    throw new Error("idempotency: claim contended five times in a row; retry the request");
  }

  /**
   * complete records the response, with the handler's own writes, in one
   * TransactWriteItems (up to 100 items), only if the lock version is
   * still ours (fencing); without writes, one conditional UpdateItem.
   * It returns false, having written nothing, when the lease was lost.
   */
  async complete(scope: string, key: string, version: number, res: Stored, writes: TransactWriteItem[] = []): Promise<boolean> {
    const ea = this.clock() + this.retentionMs;
    const record: TransactWriteItem = {
      Update: {
        TableName: this.table, Key: { pk: { S: IdempotencyStore.pk(scope, key) } },
        UpdateExpression: "SET st = :completed, code = :code, ctype = :ctype, body = :body, ea = :ea, purge = :purge REMOVE lu",
        ConditionExpression: "st = :processing AND v = :mine",
        ExpressionAttributeValues: {
          ":completed": { S: "COMPLETED" }, ":code": { N: String(res.code) }, ":ctype": { S: res.ctype },
          ":body": { B: res.body }, ":ea": { N: String(ea) }, ":purge": { N: String(Math.ceil(ea / 1000) + PURGE_MARGIN_S) },
          ":processing": { S: "PROCESSING" }, ":mine": { N: String(version) },
        },
      },
    };
    if (writes.length === 0) return this.conditional(new UpdateItemCommand(record.Update!));
    try {
      await this.client.send(new TransactWriteItemsCommand({ TransactItems: [record, ...writes] }));
      return true;
    } catch (e) {
      if (e instanceof TransactionCanceledException && e.CancellationReasons?.[0]?.Code === "ConditionalCheckFailed") return false;
      throw e;
    }
  }

  /** heartbeat extends our lease; false when it is no longer ours. */
  async heartbeat(scope: string, key: string, version: number, leaseMs: number): Promise<boolean> {
    return this.conditional(new UpdateItemCommand({
      TableName: this.table, Key: { pk: { S: IdempotencyStore.pk(scope, key) } },
      UpdateExpression: "SET lu = :lu", ConditionExpression: "st = :processing AND v = :mine",
      ExpressionAttributeValues: { ":lu": { N: String(this.clock() + leaseMs) }, ":processing": { S: "PROCESSING" }, ":mine": { N: String(version) } },
    }));
  }

  /**
   * release ends our lease at once after a transient failure (a 5xx, an
   * exception): the record is kept and the next retry takes it over. The
   * holder itself gave it up, so no skew is waited for: lu = 0.
   */
  async release(scope: string, key: string, version: number): Promise<void> {
    await this.conditional(new UpdateItemCommand({
      TableName: this.table, Key: { pk: { S: IdempotencyStore.pk(scope, key) } },
      UpdateExpression: "SET lu = :zero", ConditionExpression: "st = :processing AND v = :mine",
      ExpressionAttributeValues: { ":zero": { N: "0" }, ":processing": { S: "PROCESSING" }, ":mine": { N: String(version) } },
    }));
  }

  /** read returns the live (not expired) record of (scope, key), or undefined. */
  async read(scope: string, key: string): Promise<Record<string, AttributeValue> | undefined> {
    const got = await this.client.send(new GetItemCommand({ TableName: this.table, Key: { pk: { S: IdempotencyStore.pk(scope, key) } }, ConsistentRead: true }));
    if (!got.Item || Number(got.Item.ea.N) <= this.clock()) return undefined;
    return got.Item;
  }

  private item(pk: string, scope: string, key: string, fp: string, v: number, now: number, leaseMs: number): Record<string, AttributeValue> {
    const ea = now + this.retentionMs;
    return {
      pk: { S: pk }, scope: { S: scope }, key: { S: key }, fp: { S: fp }, st: { S: "PROCESSING" },
      v: { N: String(v) }, lu: { N: String(now + leaseMs) }, ea: { N: String(ea) },
      purge: { N: String(Math.ceil(ea / 1000) + PURGE_MARGIN_S) },
    };
  }

  /** conditional sends a conditional write: false when its condition failed. */
  private async conditional(cmd: PutItemCommand | UpdateItemCommand): Promise<boolean> {
    try {
      await this.client.send(cmd as PutItemCommand);
      return true;
    } catch (e) {
      if (e instanceof ConditionalCheckFailedException) return false;
      throw e;
    }
  }
}
`

// src/idempotency.ts
const tsMiddleware = `import type { NextFunction, Request, RequestHandler, Response } from "express";
import type { TransactWriteItem } from "@aws-sdk/client-dynamodb";
import type { ActionConfig } from "./config";
import { fingerprint } from "./fingerprint";
import { IdempotencyStore } from "./store";

export interface IdempotentOptions {
  store: IdempotencyStore;
  action: ActionConfig;
  /** The authenticated user or tenant (from the session or token, never the body). */
  scope: (req: Request) => string | undefined;
  /** Overrides action.leaseMs (a test's short lease). */
  leaseMs?: number;
  /** Heartbeat period; default a third of the lease; 0 turns heartbeats off. */
  heartbeatMs?: number;
}

/** What the handler finds in res.locals.idempotency. */
export interface IdempotencyContext {
  /** The composed key {scope}_{action}_{intent}: derive your own ids from it. */
  key: string;
  /** Your own writes: committed with the response, in one transaction, only if the lease is still ours. */
  writes: TransactWriteItem[];
  /** renew extends the lease and says whether it is still ours: check it before an effect outside the transaction. */
  renew: () => Promise<boolean>;
}

const KEY = /^[A-Za-z0-9_.:-]{1,200}$/;
const SCOPE = /^[A-Za-z0-9_.:@-]{1,54}$/;

/**
 * idempotent protects one action: claim the key, run the handler, record
 * its response with its writes (fenced by the lock version), and replay
 * the response byte for byte to every retry (Idempotent-Replayed: true).
 * The handler answers with res.send, res.json or res.end (one body, no
 * res.write streaming); a 5xx or an error ends the lease for a retry.
 */
export function idempotent(o: IdempotentOptions): RequestHandler {
  const leaseMs = o.leaseMs ?? o.action.leaseMs;
  const heartbeatMs = o.heartbeatMs ?? Math.floor(leaseMs / 3);
  return (req: Request, res: Response, next: NextFunction) => {
    const intent = req.get("Idempotency-Key");
    if (!intent || !KEY.test(intent)) {
      res.status(400).json({ error: "Idempotency-Key header required: 1 to 200 characters of A-Z a-z 0-9 _ . : -" });
      return;
    }
    const scope = o.scope(req);
    if (!scope) {
      res.status(401).json({ error: "authentication required" });
      return;
    }
    if (!SCOPE.test(scope)) {
      next(new Error("idempotency: the scope must be 1 to 54 characters of A-Z a-z 0-9 _ . : @ - (map your user id onto them)"));
      return;
    }
    const key = scope + "_" + o.action.name + "_" + intent;
    const fp = fingerprint(o.action, req.body);
    o.store.claim(scope, key, fp, leaseMs).then((c) => {
      switch (c.kind) {
        case "mismatch":
          res.status(422).json({ error: "this Idempotency-Key was used with another request: use a new key for a new request" });
          return;
        case "in_progress":
          res.set("Retry-After", String(Math.max(1, Math.ceil(c.retryAfterMs / 1000))));
          res.status(409).json({ error: "a request with this Idempotency-Key is in progress: retry later" });
          return;
        case "completed":
          res.status(c.response.code).set("Idempotent-Replayed", "true");
          if (c.response.ctype) res.set("Content-Type", c.response.ctype);
          res.end(Buffer.from(c.response.body));
          return;
      }
      run(o.store, res, scope, key, c.version, leaseMs, heartbeatMs, next);
    }, next);
  };
}

function run(store: IdempotencyStore, res: Response, scope: string, key: string, version: number,
  leaseMs: number, heartbeatMs: number, next: NextFunction): void {
  const ctx: IdempotencyContext = { key, writes: [], renew: () => store.heartbeat(scope, key, version, leaseMs) };
  res.locals.idempotency = ctx;
  const beat = heartbeatMs > 0 ? setInterval(() => { store.heartbeat(scope, key, version, leaseMs).catch(() => {}); }, heartbeatMs) : undefined;
  beat?.unref();
  const end = res.end.bind(res) as (...a: unknown[]) => Response;
  // The response is recorded before it is sent: a client that got it can
  // always have it again.
  res.end = ((chunk?: unknown, encoding?: unknown, cb?: unknown) => {
    if (beat) clearInterval(beat);
    if (typeof chunk === "function") { cb = chunk; chunk = undefined; }
    if (typeof encoding === "function") { cb = encoding; encoding = undefined; }
    const body = chunk === undefined || chunk === null ? Buffer.alloc(0)
      : typeof chunk === "string" ? Buffer.from(chunk, (encoding as BufferEncoding) ?? "utf8") : Buffer.from(chunk as Uint8Array);
    const code = res.statusCode;
    const done = (ok: boolean) => {
      if (!ok) {
        // Our lease was taken over: nothing of ours was written.
        res.removeHeader("Content-Length");
        res.removeHeader("ETag");
        res.status(409).set("Content-Type", "application/json; charset=utf-8");
        return end(JSON.stringify({ error: "this request lost its lease to a retry: nothing was recorded" }), cb);
      }
      return end(body, cb);
    };
    if (code >= 500) {
      store.release(scope, key, version).then(() => end(body, cb), () => end(body, cb));
      return res;
    }
    store.complete(scope, key, version, { code, ctype: String(res.get("Content-Type") ?? ""), body }, ctx.writes)
      .then(done, (err) => {
        store.release(scope, key, version).catch(() => {});
        res.removeHeader("Content-Length");
        res.removeHeader("ETag");
        res.status(503).set("Content-Type", "application/json; charset=utf-8");
        end(JSON.stringify({ error: "could not record the outcome: " + String(err?.name ?? err) }), cb);
      });
    return res;
  }) as Response["end"];
  next();
}

/**
 * idempotencyStatus answers GET <route>/:key with the state of the
 * caller's key: a key of another scope is 404, never someone's response.
 */
export function idempotencyStatus(store: IdempotencyStore, action: ActionConfig, scope: (req: Request) => string | undefined): RequestHandler {
  return (req, res, next) => {
    const s = scope(req);
    if (!s) { res.status(401).json({ error: "authentication required" }); return; }
    store.read(s, s + "_" + action.name + "_" + req.params.key).then((it) => {
      if (!it) { res.status(404).json({ error: "no such key" }); return; }
      res.json({ status: it.st.S });
    }, next);
  };
}
`

// src/sqsConsumer.ts
const tsSQSConsumer = `import { createHash } from "node:crypto";
import type { TransactWriteItem } from "@aws-sdk/client-dynamodb";
import type { ActionConfig } from "./config";
import { fingerprint } from "./fingerprint";
import { IdempotencyStore } from "./store";

/**
 * SQS delivers a standard queue's message at least once, and a producer's
 * retry is a new message with a new MessageId: the key is derived from a
 * business id in the body, identical on every delivery and every resend.
 * (MessageDeduplicationId exists only on FIFO queues and only for 5
 * minutes: it does not replace this.)
 */
export interface SqsMessage { MessageId?: string; Body?: string }

export type Outcome = "done" | "duplicate" | "in_progress" | "mismatch";

/**
 * consume runs work at most once per business id within retention. Delete
 * the message on "done" and "duplicate"; leave it on "in_progress" (it is
 * redelivered after its visibility timeout); send it to the DLQ on
 * "mismatch" (same id, other content: a producer bug).
 */
export async function consume(store: IdempotencyStore, action: ActionConfig & { identifying: readonly string[] },
  tenant: string, msg: SqsMessage, work: (payload: Record<string, unknown>, writes: TransactWriteItem[]) => Promise<void>,
  leaseMs = action.leaseMs): Promise<Outcome> {
  const payload = JSON.parse(msg.Body ?? "{}") as Record<string, unknown>;
  const h = createHash("sha256");
  for (const f of action.identifying) {
    if (payload[f] === undefined || payload[f] === null) throw new Error(action.name + ": message without " + f + ": cannot derive its key");
    h.update(f + "=" + JSON.stringify(payload[f]) + "\n");
  }
  const key = tenant + "_" + action.name + "_" + h.digest("hex");
  const c = await store.claim(tenant, key, fingerprint(action, payload), leaseMs);
  if (c.kind === "completed") return "duplicate";
  if (c.kind !== "claimed") return c.kind;
  const writes: TransactWriteItem[] = [];
  try {
    await work(payload, writes);
  } catch (e) {
    await store.release(tenant, key, c.version);
    throw e;
  }
  return (await store.complete(tenant, key, c.version, { code: 200, ctype: "", body: new Uint8Array() }, writes)) ? "done" : "in_progress";
}
`

// src/cleanup.ts
const tsCleanup = `import { ConditionalCheckFailedException, DeleteItemCommand, ScanCommand, type AttributeValue } from "@aws-sdk/client-dynamodb";
import { IdempotencyStore } from "./store";

/**
 * cleanup deletes expired records (ea past). The TTL attribute purge makes
 * DynamoDB delete them anyway, within days: run this where storage or a
 * scan's cost matters sooner, e.g. hourly. Each delete is conditioned on
 * ea still being past, so a key claimed again meanwhile is kept. Returns
 * how many it deleted.
 */
export async function cleanup(store: IdempotencyStore, pageSize = 500): Promise<number> {
  let deleted = 0;
  let start: Record<string, AttributeValue> | undefined;
  do {
    const now = String(store.clock());
    const page = await store.client.send(new ScanCommand({
      TableName: store.table, Limit: pageSize, ExclusiveStartKey: start,
      ProjectionExpression: "pk", FilterExpression: "ea <= :now", ExpressionAttributeValues: { ":now": { N: now } },
    }));
    for (const it of page.Items ?? []) {
      try {
        await store.client.send(new DeleteItemCommand({
          TableName: store.table, Key: { pk: it.pk }, ConditionExpression: "ea <= :now", ExpressionAttributeValues: { ":now": { N: now } },
        }));
        deleted++;
      } catch (e) {
        if (!(e instanceof ConditionalCheckFailedException)) throw e;
      }
    }
    start = page.LastEvaluatedKey;
  } while (start);
  return deleted;
}
`

// test/kit.test.ts
const tsTests = `import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { actions, skewMs } from "../src/config";
import { cleanup } from "../src/cleanup";
import { Clock, count, fresh, post, serve } from "./support";

const action = actions.` + "{{HTTP}}" + `;
// A request of the action: each significant field with a value of its own.
const body = (change = ""): Record<string, unknown> => Object.fromEntries(action.fields.map((f, i) => [f, "v" + i + (i === 0 ? change : "")]));

test("same key twice: one effect, the response replayed byte for byte", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const key = randomUUID();
  const first = await post(app.url, "alice", key, body());
  const second = await post(app.url, "alice", key, body());
  assert.equal(first.status, 201);
  assert.equal(first.replayed, false);
  assert.deepEqual([second.status, second.replayed, second.text], [201, true, first.text]);
  assert.equal(await count(orders), 1);
});

test("concurrent requests on one key: exactly one effect", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const key = randomUUID();
  const all = await Promise.all(Array.from({ length: 25 }, () => post(app.url, "alice", key, body())));
  const ran = all.filter((r) => r.status === 201 && !r.replayed);
  assert.equal(ran.length, 1, JSON.stringify(all.map((r) => r.status)));
  for (const r of all) {
    assert.ok(r.status === 409 || (r.status === 201 && r.text === ran[0].text), "unexpected " + r.status + " " + r.text);
  }
  assert.equal(await count(orders), 1);
});

test("same key, another significant field: refused, the record unchanged", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const key = randomUUID();
  const first = await post(app.url, "alice", key, body());
  const other = await post(app.url, "alice", key, body("-changed"));
  assert.equal(other.status, 422);
  const again = await post(app.url, "alice", key, body());
  assert.deepEqual([again.replayed, again.text], [true, first.text]);
  assert.equal(await count(orders), 1);
});

test("same key, another volatile field: replayed", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const key = randomUUID();
  const first = await post(app.url, "alice", key, { ...body(), requested_at: "2026-01-01T00:00:00Z" });
  const retry = await post(app.url, "alice", key, { requested_at: "2026-01-01T00:00:09Z", ...body() });
  assert.deepEqual([retry.status, retry.replayed, retry.text], [201, true, first.text]);
  assert.equal(await count(orders), 1);
});

test("holder stalled past its lease: a retry takes over and completes once; the old holder's completion is refused", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  let release!: () => void;
  const stalled = new Promise<void>((r) => { release = r; });
  let releaseRetry!: () => void;
  const retryHeld = new Promise<void>((r) => { releaseRetry = r; });
  const leaseMs = 1_000;
  const a = await serve(store, orders, { leaseMs, heartbeatMs: 0, hold: async (started) => { started(); await stalled; } });
  const b = await serve(store, orders, { leaseMs, hold: async (started) => { started(); await retryHeld; } });
  t.after(a.close);
  t.after(b.close);
  const key = randomUUID();
  const holder = post(a.url, "alice", key, body());
  await a.started;
  const early = await post(b.url, "alice", key, body());
  assert.equal(early.status, 409, "a live lease is in progress");
  clock.advance(leaseMs + skewMs + 1);
  // The retry takes over and is held while the old holder wakes up and
  // tries to record its outcome: the record is PROCESSING under the
  // retry's lock version, so only the fence refuses it.
  const retrying = post(b.url, "alice", key, body());
  await b.started;
  release();
  const old = await holder;
  assert.equal(old.status, 409, "the old holder's completion must be refused: " + old.text);
  releaseRetry();
  const retry = await retrying;
  assert.deepEqual([retry.status, retry.replayed], [201, false], retry.text);
  assert.equal(await count(orders), 1);
  const replay = await post(b.url, "alice", key, body());
  assert.deepEqual([replay.replayed, replay.text], [true, retry.text]);
});

test("retry after expiry: a new request", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const key = randomUUID();
  await post(app.url, "alice", key, body());
  clock.advance(store.retentionMs + 1);
  const later = await post(app.url, "alice", key, body());
  assert.deepEqual([later.status, later.replayed], [201, false]);
  assert.equal(await count(orders), 2);
});

test("a key of another scope: 404, never a replay", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const key = randomUUID();
  const alices = await post(app.url, "alice", key, body());
  const mine = await fetch(app.url + "/orders/keys/" + key, { headers: { "X-User": "alice" } });
  assert.equal(mine.status, 200);
  const theirs = await fetch(app.url + "/orders/keys/" + key, { headers: { "X-User": "mallory" } });
  assert.equal(theirs.status, 404);
  const bobs = await post(app.url, "mallory", key, body());
  assert.equal(bobs.replayed, false);
  assert.notEqual(bobs.text, alices.text);
});

test("cleanup deletes expired records and keeps live ones", async (t) => {
  const clock = new Clock();
  const { store, orders } = await fresh(clock);
  const app = await serve(store, orders);
  t.after(app.close);
  const old = randomUUID();
  const live = randomUUID();
  await post(app.url, "alice", old, body());
  clock.advance(store.retentionMs / 2);
  await post(app.url, "alice", live, body());
  clock.advance(store.retentionMs / 2 + 1);
  assert.equal(await cleanup(store), 1);
  assert.equal(await count(store.table), 1);
  const kept = await post(app.url, "alice", live, body());
  assert.equal(kept.replayed, true);
});

`

// test/sqs.test.ts
const tsSQSTests = `import { test } from "node:test";
import assert from "node:assert/strict";
import { actions } from "../src/config";
import { consume } from "../src/sqsConsumer";
import { Clock, fresh } from "./support";

test("SQS consumer: a message delivered twice and resent with a new MessageId: one effect", async () => {
  const clock = new Clock();
  const { store } = await fresh(clock);
  const consumer = actions.` + "{{CONSUMER}}" + `;
  const payload = Object.fromEntries(consumer.fields.map((f, i) => [f, "m" + i]));
  let effects = 0;
  const work = async () => { effects++; };
  const deliver = (id: string, p = payload) => consume(store, consumer, "acct_42", { MessageId: id, Body: JSON.stringify(p) }, work);
  assert.equal(await deliver("m-1"), "done");
  assert.equal(await deliver("m-1"), "duplicate");
  assert.equal(await deliver("m-2"), "duplicate");
  const changed = { ...payload, [consumer.fields.find((f) => !(consumer.identifying as readonly string[]).includes(f)) ?? consumer.fields[0]]: "other" };
  assert.equal(await deliver("m-3", changed), "mismatch");
  assert.equal(effects, 1);
});
`

// test/support.ts
const tsSupport = `import { randomUUID } from "node:crypto";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import express, { type Request } from "express";
import { CreateTableCommand, DynamoDBClient, PutItemCommand, ScanCommand, waitUntilTableExists } from "@aws-sdk/client-dynamodb";
import { actions } from "../src/config";
import { idempotent, idempotencyStatus, type IdempotencyContext } from "../src/idempotency";
import { IdempotencyStore } from "../src/store";

/** The DynamoDB endpoint under test (dynalite, DynamoDB Local or AWS). */
export const client = new DynamoDBClient({
  endpoint: process.env.DYNAMO_ENDPOINT ?? "http://127.0.0.1:8000",
  region: "us-east-1", credentials: { accessKeyId: "test", secretAccessKey: "test" },
});

/** A clock the tests move forward, instead of waiting. */
export class Clock {
  offset = 0;
  now = (): number => new Date().getTime() + this.offset;
  advance(ms: number) { this.offset += ms; }
}

async function table(name: string): Promise<void> {
  await client.send(new CreateTableCommand({
    TableName: name, BillingMode: "PAY_PER_REQUEST",
    AttributeDefinitions: [{ AttributeName: "pk", AttributeType: "S" }],
    KeySchema: [{ AttributeName: "pk", KeyType: "HASH" }],
  }));
  await waitUntilTableExists({ client, maxWaitTime: 30, minDelay: 1 }, { TableName: name });
}

/** fresh creates the idempotency table and an orders table of the test's own. */
export async function fresh(clock: Clock): Promise<{ store: IdempotencyStore; orders: string }> {
  const id = randomUUID().slice(0, 8);
  const records = "idempotency_" + id;
  const orders = "orders_" + id;
  await Promise.all([table(records), table(orders)]);
  return { store: new IdempotencyStore({ client, table: records, clock: clock.now }), orders };
}

export async function count(tableName: string): Promise<number> {
  const out = await client.send(new ScanCommand({ TableName: tableName, Select: "COUNT", ConsistentRead: true }));
  return out.Count ?? 0;
}

export interface AppOptions { leaseMs?: number; heartbeatMs?: number; hold?: (started: () => void) => Promise<void> }

/** The user: a real app reads it from its session or token. */
const user = (req: Request) => req.get("X-User");

/**
 * serve starts a real Express app on a free port: POST /orders creates an
 * order (the effect: one item in the orders table, written with the
 * response), GET /orders/keys/:key reads a key's state.
 */
export async function serve(store: IdempotencyStore, orders: string, o: AppOptions = {}): Promise<{ url: string; close: () => Promise<void>; started: Promise<void> }> {
  let started!: () => void;
  const startedP = new Promise<void>((r) => { started = r; });
  const app = express();
  app.use(express.json());
  app.get("/orders/keys/:key", idempotencyStatus(store, actions.` + "{{HTTP}}" + `, user));
  app.post("/orders", idempotent({ store, action: actions.` + "{{HTTP}}" + `, scope: user, leaseMs: o.leaseMs, heartbeatMs: o.heartbeatMs }), async (req, res, next) => {
    try {
      if (o.hold) await o.hold(started);
      const ctx = res.locals.idempotency as IdempotencyContext;
      const id = randomUUID();
      // The effect. On DynamoDB, push it to ctx.writes instead: it then
      // commits in one TransactWriteItems with the fenced record (dynalite,
      // which these tests run on, has no transactions).
      if (!(await ctx.renew())) { res.status(409).json({ error: "lease lost: a retry took this request over" }); return; }
      await client.send(new PutItemCommand({ TableName: orders, Item: { pk: { S: id }, request: { S: JSON.stringify(req.body) } } }));
      res.status(201).json({ id, ...req.body });
    } catch (e) { next(e); }
  });
  const server: Server = await new Promise((r) => { const s = app.listen(0, "127.0.0.1", () => r(s)); });
  const url = "http://127.0.0.1:" + (server.address() as AddressInfo).port;
  return {
    url, started: startedP,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

export async function post(url: string, user: string, key: string, body: unknown): Promise<{ status: number; replayed: boolean; text: string }> {
  const res = await fetch(url + "/orders", {
    method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "Idempotency-Key": key, "X-User": user },
  });
  return { status: res.status, replayed: res.headers.get("Idempotent-Replayed") === "true", text: await res.text() };
}
`

// tsconfig.json
const tsConfigJSON = `{
  "compilerOptions": {
    "target": "ES2022", "module": "commonjs", "moduleResolution": "node",
    "strict": true, "esModuleInterop": true, "skipLibCheck": true,
    "outDir": "dist", "rootDir": ".", "types": ["node"]
  },
  "include": ["src", "test"]
}
`

// package.json
const tsPackageJSON = `{
  "name": "orders-idempotency",
  "private": true,
  "scripts": { "build": "tsc -p .", "test": "tsc -p . && node --test --test-concurrency=1 dist/test/" },
  "dependencies": { "@aws-sdk/client-dynamodb": "3.1178.0", "express": "4.21.2" },
  "devDependencies": { "@types/express": "4.17.21", "@types/node": "20.19.9", "typescript": "5.9.3" }
}
`
