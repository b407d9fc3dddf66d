package design

import (
	"fmt"
	"strings"
)

// The seed's lists, tailored to one document: the ten anti-patterns of
// section 9, the test scenarios of section 11 (and D6) and the ten
// build-order steps of section 12 (and D8).

// AntiPattern is one row of section 9. Relevant says why it threatens this
// design in particular ("" when it is listed for completeness only).
type AntiPattern struct {
	ID, Name, Why, Fix, Relevant string
}

// seedAntiPatternIDs are the seed's ten anti-patterns, in its order.
var seedAntiPatternIDs = []string{
	"retry-without-key", "ui-disabling-alone", "keys-kept-forever", "trusting-provider",
	"app-clock", "unencrypted-responses", "no-partitioning-plan", "check-then-act",
	"volatile-key", "lock-no-timeout",
}

// liveKeys is the number of records the store holds at steady state: the
// daily volume times the retention.
func liveKeys(d *Document) float64 {
	return float64(d.Answers.VolumePerDay) * d.Retention.Hours() / 24
}

// highVolume is the number of live records past which cleanup and
// partitioning need a plan of their own.
const highVolume = 10e6

func hasHTTP(d *Document) bool {
	for _, x := range d.Actions {
		if x.Kind == "http" {
			return true
		}
	}
	return false
}

func hasServerKeys(d *Document) bool {
	for _, x := range d.Actions {
		if x.KeySource == "server" {
			return true
		}
	}
	return false
}

// antiPatterns returns the seed's ten anti-patterns, each with why it
// breaks and the fix, those relevant to d marked, then payonce's own.
func antiPatterns(d *Document) []AntiPattern {
	a := d.Answers
	var ap []AntiPattern
	add := func(id, name, why, fix, relevant string) {
		ap = append(ap, AntiPattern{id, name, why, fix, relevant})
	}

	rel := ""
	if len(a.RetrySources) > 0 {
		rel = "your retry sources: " + strings.Join(a.RetrySources, ", ")
	} else if hasHTTP(d) {
		rel = "your HTTP actions are retried by clients and proxies"
	}
	add("retry-without-key", "retrying without an idempotency key",
		"every retry of a request that timed out is a new request: the first may have succeeded, and the retry does it again",
		"the client generates one key per intent and sends it on the first attempt and every retry; the server claims it before the effect", rel)

	rel = ""
	if hasHTTP(d) {
		rel = "your HTTP actions have clients that can double-submit"
	}
	add("ui-disabling-alone", "disabling the button as the only protection (client-side only)",
		"a double click is one source among many: a reload, a second tab, a mobile retry, a proxy or load-balancer replay all bypass the UI",
		"disable the button for the user's comfort, and let the server's key claim decide; the key is created with the form, not at the click", rel)

	rel = ""
	switch d.Store {
	case StorePostgres, StoreMySQL, StoreUnknown:
		rel = fmt.Sprintf("%s has no native expiry: the table grows by %d rows a day until a job deletes them", storeNameOr(d.Store), a.VolumePerDay)
	default:
		rel = fmt.Sprintf("%s expires records only when each is written with its expiry", storeName(d.Store))
	}
	add("keys-kept-forever", "keeping keys forever (no expiry or retention)",
		"the store grows without bound, its indexes slow every claim, and stored responses keep personal data past any need",
		fmt.Sprintf("every record carries expires_at = created_at + retention (%s here, section 2(e)), and %s", human(d.Retention), expiryHow(d.Store)), rel)

	rel = ""
	if len(d.Providers) > 0 {
		var ns []string
		for _, p := range d.Providers {
			ns = append(ns, p.Name)
		}
		rel = "you call " + strings.Join(ns, ", ")
	}
	add("trusting-provider", "trusting the provider's idempotency against local duplicates",
		"the provider deduplicates only calls that carry the same reference within its window; two local requests that build two references, or a local write done twice, are two charges or two orders for it",
		"claim the key locally first; derive the provider reference from the key (section 6) so a retry re-sends the same one; record the intent before the call", rel)

	rel = ""
	switch {
	case d.Store == StoreDynamo:
		rel = "DynamoDB has no server clock in a condition: leases compare app clocks, hence the skew buffer (D2)"
	case a.Concurrency == "multi-instance" || a.Concurrency == "global":
		rel = "several instances compare lease ends: their clocks drift apart"
	}
	add("app-clock", "app clock vs database clock for leases and expiry",
		"each instance's clock drifts: an instance whose clock runs ahead takes a lease that is still live, one that runs behind keeps an expired one; expiry decided by the app clock differs per instance",
		"compare and set every lease end and expiry with the store's clock in the same statement ("+storeClock(d.Store)+"); where the store has none, add a skew buffer to every lease and expiry", rel)

	rel = ""
	if len(d.Providers) > 0 {
		rel = "responses of payment routes hold payment details"
	} else if hasHTTP(d) {
		rel = "your HTTP responses are stored for replay"
	}
	add("unencrypted-responses", "caching responses unencrypted (sensitive bodies at rest)",
		"stored responses are a second copy of personal and payment data, read by anyone with database or backup access, and kept for the whole retention",
		encryptFix(a.Stack.IsGo()), rel)

	rel = ""
	if n := liveKeys(d); n >= highVolume {
		rel = fmt.Sprintf("about %.3g live records (%d a day kept %s)", n, a.VolumePerDay, human(d.Retention))
	}
	add("no-partitioning-plan", "no partitioning or cleanup plan at high volume",
		"one large DELETE locks and bloats the table, vacuum falls behind, and claims slow down while the table grows past memory",
		"plan the cleanup from the volume: a job deleting expired records in short batches, its rate above the insert rate, watched by an alert on the store's size (D5); partition only where uniqueness survives it: range partitioning by created_at breaks the primary key on the key (BENCHMARKS.md, \"Why not partition by created_at\")", rel)

	add("check-then-act", "check-then-act without an atomic claim",
		"two concurrent requests both read \"no record\" and both act: the duplicate happens exactly when it is most likely, under retries",
		"one atomic claim: an insert under a unique constraint, a conditional write, SET NX; its loser reads the record and replays, waits or is refused",
		fmt.Sprintf("every protected action: %s", storeClaim(d.Store)))

	rel = "every protected action"
	if hasServerKeys(d) {
		rel = "your server-derived keys (consumers, webhooks, cron jobs)"
	}
	add("volatile-key", "a key from volatile data (uuid.New or time.Now per attempt)",
		"a key generated at each attempt is new on every retry: the duplicate it was meant to stop gets a key of its own",
		"a client generates the key once per intent and stores it with the pending request; a server derives it from stable data only (a message or event id, the scheduled slot), never the clock", rel)

	rel = "every protected action"
	if len(d.Actions) > 0 {
		rel = fmt.Sprintf("every action's lease (section 4: %s)", human(d.Actions[0].LockTimeout))
	}
	add("lock-no-timeout", "a lock with no timeout",
		"a holder that crashes keeps the key locked forever: every retry is refused, the action can never complete; a process-local mutex protects one instance only",
		"a lease in the store with an end past the action's p99 with margin, extended by heartbeats while the holder lives and reclaimed by compare-and-swap on a fencing version once it ends", rel)

	// payonce's own, in addition to the seed's.
	add("retention-short", "retention shorter than a retry horizon",
		"a late retry finds no record and runs again", "retention at least the longest retry horizon (section 2(e))", "")
	add("whole-body-fingerprint", "fingerprint over the whole raw body or headers",
		"trace ids and timestamps differ per retry: every retry looks like a conflict", "fingerprint the significant fields only (section 3)", "")
	add("timeout-as-failure", "treating a timeout as a failure",
		"the provider may have charged: unknown must stay unknown until proven", "record UNKNOWN and let the retry or the reconciler settle it", "")
	if b := strings.ToLower(a.Stack.Broker); strings.Contains(b, "kafka") || strings.Contains(b, "nats") || strings.Contains(b, "river") {
		add("broker-exactly-once", "trusting the broker's exactly-once",
			"it covers the broker, not your database or the provider", "commit the inbox record with the effect", "your broker: "+a.Stack.Broker)
	}
	if a.Stack.IsGo() {
		add("ctx-final-commit", "context.Background() around the final commit ignored, or ctx canceled before COMPLETED is written",
			"the work is done but the record is released", "pass a detached context for the completion (the executor does)", "Go")
	}
	return ap
}

// Scenario is one row of section 11, and one test of D6.
type Scenario struct {
	// Test names the test function (TestAction<Test>).
	Test                            string
	Scenario, Expectation, Verifies string
}

// scenarios returns section 11's table for d: the seed's eight, the
// providers' when d has providers, the saga's when an action has steps.
func scenarios(d *Document) []Scenario {
	s := []Scenario{
		{"ReplaysSameKey", "same key, same significant fields, sent twice in sequence",
			"one effect; the second answer is the first's, replayed byte for byte (Idempotent-Replayed: true)", "one execution per key; the stored response is the answer"},
		{"ConcurrentSameKeyOneEffect", "50 concurrent requests with one key",
			"exactly one effect; the others get 409 + Retry-After or the replay", "the claim is atomic (no check-then-act)"},
		{"DifferentFieldsRefused", "same key, a different significant field",
			"refused (409, or 422), the record unchanged, the stored fingerprint not revealed", "the fingerprint covers the significant fields (C2)"},
		{"VolatileFieldReplayed", "same key, a different volatile field (timestamp, trace id)",
			"replayed, not refused", "volatile fields are excluded from the fingerprint (C2)"},
		{"HolderKilledReclaimed", "the holder is killed mid-action",
			"after the lock timeout a retry reclaims the key and completes once; the old holder's completion is refused", "leases end and are fenced (C3)"},
		{"ExpiredKeyIsNew", "a retry after expires_at",
			"treated as a new request, never a stale replay", "retention and expiry (C4)"},
		{"OtherScopeIsolated", "the same key under another scope (user or tenant)",
			"another record: never the first scope's answer (404 on lookup)", "keys are scoped by authentication (C1)"},
		{"StoreDownFailsClosed", "the store is unreachable during the claim",
			"the request fails (503) and no effect happens without a record", "no effect without a claim"},
	}
	if len(d.Providers) > 0 {
		s = append(s,
			Scenario{"LostProviderAnswer", "the provider's answer is lost after it committed",
				"the retry re-sends the same derived reference and gets the provider's replay: one charge at the provider", "provider references derived from the key (C5)"},
			Scenario{"ProviderTimeoutPending", "the provider times out",
				"the outcome stays pending and the intent open; the reconciler settles it from the provider's state", "UNKNOWN is never turned into FAILED without proof"})
	}
	for _, x := range d.Actions {
		if x.MultiStep() {
			s = append(s,
				Scenario{"SagaStepFailsCompensates", "a saga step fails permanently",
					"the completed steps are compensated once each, in reverse order", "compensation per step (C6)"},
				Scenario{"SagaResumesCompensation", "a crash during compensation",
					"the compensation resumes from the recorded state on restart: each compensation runs once, none is skipped", "the saga is a resumable state machine (C6)"})
			break
		}
	}
	return s
}

// buildOrder returns the seed's ten build-order steps, each with its
// deployment safety note, tailored to d.
func buildOrder(d *Document) [][2]string {
	schema := "Apply the idempotency store's schema (D2)"
	switch d.Store {
	case StoreRedis:
		schema = "Prepare the Redis store (D2): maxmemory-policy noeviction, persistence on, the scripts loaded"
	case StoreDynamo:
		schema = "Create the DynamoDB table and enable its TTL attribute (D2)"
	case StoreMongo:
		schema = "Create the collection's unique index and TTL index (D2)"
	}
	keys := "Clients send an Idempotency-Key, generated once per intent and reused on every retry"
	if hasServerKeys(d) {
		keys += "; consumers and jobs derive theirs from stable data (section 2)"
	}
	enforce := "Enforce per route"
	enforceNote := "per-route rollout: one route at a time behind a flag, the lowest-risk first; roll back by flipping the flag"
	if len(d.Providers) > 0 {
		enforce = "Enforce per route; payment routes last, through payments.Client (intent before the call, derived references) with the reconciler running"
		if !d.Answers.Stack.IsGo() {
			enforce = "Enforce per route; payment routes last, each recording its intent before the provider call and sending references derived from the key (section 6), with the reconciler running: a scheduled job that looks every unknown outcome up at the provider by its reference and settles it"
		}
		enforceNote += "; the reconciler is deployed before the first enforced charge, so unknown outcomes are settled from day one"
	}
	for _, x := range d.Actions {
		if x.MultiStep() {
			enforce += "; multi-step actions as sagas with compensations (new sagas only)"
			break
		}
	}
	chaos := "Chaos test in staging: kill holders mid-action, restart the store, replay requests at the load balancer"
	if len(d.Providers) > 0 {
		chaos += ", drop provider answers"
	}
	cleanupNote := "cleanup job: deletes only expired, non-PROCESSING records in short batches; the store's size levels off"
	if n := liveKeys(d); n >= highVolume {
		cleanupNote += fmt.Sprintf(" at about %.3g records: check the delete rate exceeds the insert rate before enforcing more routes", n)
	}
	return [][2]string{
		{schema, "schema first: an additive change deployed and verified on its own, before any code uses it"},
		{keys, "expand/contract: the server accepts requests with and without a key (expand) until every client sends one; only then is the key required (contract)"},
		{"Deploy the middleware in log-only mode on the protected routes", "shadow mode: it claims and records, logs duplicates and mismatches (short hashes only), refuses nothing; compare with expectations for a day of traffic"},
		{"Install the monitoring and alert rules (section 10, D7)", "alerts before enforce: every alert live, routed and seen firing in staging before any route refuses a request"},
		{enforce, enforceNote},
		{"Start the cleanup job (D5)", cleanupNote},
		{fmt.Sprintf("Load test at the stated volume (%d a day, at peak rate)", d.Answers.VolumePerDay), "load test: twice the peak with a realistic share of retries; claim p99 and the store's load within budget, no lock timeouts"},
		{chaos, "chaos/kill test: the invariants of section 11 hold (one effect per key) before the next route is enforced"},
		{"Write and rehearse the runbook (D9)", "runbook: on-call has run each first command in staging and knows never to delete a PROCESSING record"},
		{"Review the design against constraints C1-C7 and this document", "review: a second engineer signs off the key sources, fields, lock timeouts and retention; repeat for every new protected action"},
	}
}

func storeNameOr(kind string) string {
	if n := storeName(kind); n != "" {
		return n
	}
	return "your database"
}

// storeClock says where the store's own clock is read.
func storeClock(kind string) string {
	switch kind {
	case StorePostgres:
		return "now() in the statement"
	case StoreMySQL:
		return "NOW(6) in the statement"
	case StoreRedis:
		return "TIME inside the Lua script"
	case StoreDynamo:
		return "DynamoDB has none: the app's clock plus a skew buffer"
	case StoreMongo:
		return "$$NOW in the update pipeline"
	}
	return "the database's own current time in the statement"
}

func encryptFix(goCode bool) string {
	if goCode {
		return "encrypt stored responses at rest with a rotating key (idempotency.Encrypted), or store only a status and a body hash where a byte-for-byte replay is not needed (Route.StoreHashOnly)"
	}
	return "encrypt stored responses at rest with a rotating key (an AEAD such as AES-GCM, the key id stored beside each ciphertext), or store only a status and a body hash where a byte-for-byte replay is not needed"
}

func expiryHow(store string) string {
	switch store {
	case StoreRedis:
		return "every key is written with its expiry (PEXPIREAT in the same script), so Redis drops it"
	case StoreDynamo:
		return "the TTL attribute lets DynamoDB delete it (within about two days: reads check expires_at too)"
	case StoreMongo:
		return "the TTL index deletes it (its monitor runs about every 60 s: reads check expires_at too)"
	}
	return "the cleanup job (D5) deletes expired, non-PROCESSING records in short batches"
}
