package design

// D6 for consumers of Go stacks (see testSkeletonGo): the scenarios of
// section 11 for each message D3's Consume handles, through the inbox on
// PostgreSQL (effects counted as rows written in the message's
// transaction) or through the executor on another store (effects counted
// as runs of the action).

import (
	"fmt"
	"strings"
)

// inboxConsumers are the consumers D3 handles with the inbox in the
// message's transaction (a PostgreSQL store): D6 tests them.
func inboxConsumers(d *Document) []ActionPlan {
	if d.Store != StorePostgres {
		return nil
	}
	return consumersOf(d)
}

// consumersOf are d's actions that are not HTTP routes: D3 gives each a
// Consume function.
func consumersOf(d *Document) []ActionPlan {
	var out []ActionPlan
	for _, x := range d.Actions {
		if x.Kind != "http" {
			out = append(out, x)
		}
	}
	return out
}

// consumeTarget is the name of consumer x's Consume function in D3 and
// the tests' message id arguments (consumerID).
func consumeTarget(d *Document, x ActionPlan) (fn, ids string) {
	fn, _, _, _ = consumeFunc(consumersOf(d), x)
	_, _, _, ids = consumerID(d, x)
	return fn, ids
}

// consumerScenarios are D6's tests of consumer x (handled by D3's Consume
// through the inbox), by section 11's scenario names.
//
// Each is the expectation for a message (section 11 words it for a
// request) and the test's body.
func consumerScenarios(d *Document, x ActionPlan) map[string][2]string {
	n := goName(x.Name)
	fields, other := consumerFields(x), consumerOtherFields(x)
	call := func(in, flds, handle string) string { return consumeCall(d, x, in, flds, handle) }
	sc := map[string][2]string{}
	sc["ReplaysSameKey"] = [2]string{"the message delivered twice: one committed effect, both deliveries acknowledged", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	for i := range 2 {
		if ack, err := %s; err != nil || !ack {
			t.Fatalf("delivery %%d: ack %%v, %%v; want it acknowledged", i+1, ack, err)
		}
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("one message delivered twice committed %%d effects, want one", n)
	}
`, call("in", fields, "effect(id)"))}
	sc["ConcurrentSameKeyOneEffect"] = [2]string{"20 concurrent deliveries: one committed effect; a delivery that finds the message held is left to redelivery (no ack), and the redelivery is acknowledged", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Another consumer holding the message: not acknowledged, left to
			// the broker's redelivery.
			if ack, err := %[1]s; ack && err != nil {
				t.Errorf("acknowledged with an error: %%v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ack, err := %[1]s; err != nil || !ack {
		t.Fatalf("the redelivery after the storm: ack %%v, %%v; want it acknowledged", ack, err)
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("20 concurrent deliveries of one message committed %%d effects, want one", n)
	}
`, call("in", fields, "effect(id)"))}
	if other != "" {
		sc["DifferentFieldsRefused"] = [2]string{"its id again with another significant field: poison (acknowledged, ErrFingerprintMismatch), never applied; the first effect stands", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	if ack, err := %s; err != nil || !ack {
		t.Fatalf("first delivery: ack %%v, %%v", ack, err)
	}
	ack, err := %s
	if !errors.Is(err, idempotency.ErrFingerprintMismatch) || !ack {
		t.Errorf("the same message id with another %s: ack %%v, %%v; want it acknowledged as poison (ErrFingerprintMismatch)", ack, err)
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("%%d effects after the refusal, want the first one only", n)
	}
`, call("in", fields, "effect(id)"), call("in", other, "effect(id)"), x.Fields[0])}
	}
	sc["ExpiredKeyIsNew"] = [2]string{"a redelivery after the record's retention: handled as a new message, once", fmt.Sprintf(`	in, pool := testInbox(t, &inbox.Config{LockTimeout: time.Second, Retention: 2 * time.Second})
	id := newKey(t)
	// A duplicate until the record expires; then handled as a new message.
	deadline := time.Now().Add(time.Minute)
	for effects(t, pool, id) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("still %%d effects a minute after a 2s retention, want a second run once it expired", effects(t, pool, id))
		}
		if ack, err := %[1]s; err != nil || !ack {
			t.Fatalf("ack %%v, %%v", ack, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if n := effects(t, pool, id); n != 2 {
		t.Errorf("%%d effects, want 2: one per life of the record", n)
	}
`, call("in", fields, "effect(id)"))}
	sc["HolderKilledReclaimed"] = [2]string{"the consumer's process killed mid-handler, its effect written but not committed: the effect rolls back with its connection, and the redelivery handles the message once", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	killHelper(t, "^TestHelperConsumer%[1]s$", "YOURSERVICE_CONSUMER_ID="+id)
	for i := range 2 {
		if ack, err := %[2]s; err != nil || !ack {
			t.Fatalf("delivery %%d after the kill: ack %%v, %%v; want it acknowledged", i+1, ack, err)
		}
	}
	if n := effects(t, pool, id); n != 1 {
		t.Errorf("%%d effects after a killed consumer and two redeliveries, want one", n)
	}
`, n, call("in", fields, "effect(id)"))}
	if x.Kind == "webhook" && len(x.IdentifyingFields) > 1 {
		// The same event id from another sender (its first identifying
		// field): another message.
		fn, _ := consumeTarget(d, x)
		rest := strings.Repeat(", id", len(x.IdentifyingFields)-1)
		one := fmt.Sprintf("%s(context.Background(), in, \"one\"%s%s, effect(id))", fn, rest, fields)
		two := fmt.Sprintf("%s(context.Background(), in, \"two\"%s%s, effect(id))", fn, rest, fields)
		sc["OtherScopeIsolated"] = [2]string{"the same event id from another " + x.IdentifyingFields[0] + ": another message, handled on its own", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	for _, c := range []func() (bool, error){
		func() (bool, error) { return %s },
		func() (bool, error) { return %s },
	} {
		if ack, err := c(); err != nil || !ack {
			t.Fatalf("ack %%v, %%v", ack, err)
		}
	}
	if n := effects(t, pool, id); n != 2 {
		t.Errorf("one event id from two %s values committed %%d effects, want one each", n)
	}
`, one, two, x.IdentifyingFields[0])}
	}
	sc["StoreDownFailsClosed"] = [2]string{"the database unreachable: not acknowledged, an error, and the handler never runs", fmt.Sprintf(`	in, pool := testInbox(t, nil)
	id := newKey(t)
	pool.Close()
	var ran atomic.Bool
	ack, err := %s
	if err == nil || ack || ran.Load() {
		t.Errorf("database unreachable: ack %%v, %%v, handler ran %%v; want no ack, an error and no effect", ack, err, ran.Load())
	}
`, call("in", fields, "func(context.Context, pgx.Tx) error { ran.Store(true); return nil }"))}
	return sc
}

// execConsumers are the consumers D3 handles with the executor (a store
// other than PostgreSQL) whose store D6 can build: Redis, or memstore
// standing in for a store payonce has no package for.
func execConsumers(d *Document) []ActionPlan {
	if d.Store == StorePostgres || d.Store == StoreDynamo {
		return nil
	}
	return consumersOf(d)
}

// execConsumeCall is D3's Consume of consumer x (executor variant) called
// with the tests' executor exec, the tenant expression, the message id
// (consumeTarget), significant fields flds and the action work.
func execConsumeCall(d *Document, x ActionPlan, tenant, flds, work string) string {
	fn, ids := consumeTarget(d, x)
	return fmt.Sprintf("%s(context.Background(), exec, %s, %s%s, %s)", fn, tenant, ids, flds, work)
}

// execConsumerScenarios are D6's tests of consumer x handled by D3's
// Consume through the executor, by section 11's scenario names: each is
// the expectation for a message and the test's body.
func execConsumerScenarios(d *Document, x ActionPlan) map[string][2]string {
	n := goName(x.Name)
	fields, other := consumerFields(x), consumerOtherFields(x)
	call := func(tenant, flds string) string { return execConsumeCall(d, x, tenant, flds, "countRuns(&runs)") }
	sc := map[string][2]string{}
	sc["ReplaysSameKey"] = [2]string{"the message delivered twice: the action runs once, both deliveries succeed", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	for i := range 2 {
		if err := %s; err != nil {
			t.Fatalf("delivery %%d: %%v", i+1, err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("one message delivered twice ran the action %%d times, want once", runs.Load())
	}
`, call("tenant", fields))}
	sc["ConcurrentSameKeyOneEffect"] = [2]string{"20 concurrent deliveries: the action runs once; a delivery that finds the message held gets an *idempotency.InProgressError (leave it to redelivery), and the redelivery succeeds", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var busy *idempotency.InProgressError
			if err := %[1]s; err != nil && !errors.As(err, &busy) {
				t.Errorf("a concurrent delivery: %%v, want nil or an InProgressError", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := %[1]s; err != nil {
		t.Fatalf("the redelivery after the storm: %%v", err)
	}
	if runs.Load() != 1 {
		t.Errorf("20 concurrent deliveries of one message ran the action %%d times, want once", runs.Load())
	}
`, call("tenant", fields))}
	if other != "" {
		sc["DifferentFieldsRefused"] = [2]string{"its id again with another significant field: ErrFingerprintMismatch (poison), never run", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	if err := %s; err != nil {
		t.Fatal(err)
	}
	if err := %s; !errors.Is(err, idempotency.ErrFingerprintMismatch) {
		t.Errorf("the same message id with another %s: %%v, want ErrFingerprintMismatch", err)
	}
	if runs.Load() != 1 {
		t.Errorf("the action ran %%d times, want once", runs.Load())
	}
`, call("tenant", fields), call("tenant", other), x.Fields[0])}
	}
	if d.Store == StoreRedis {
		sc["HolderKilledReclaimed"] = [2]string{"the consumer's process killed mid-action: once its lease ends, a redelivery takes the message over and runs the action once", fmt.Sprintf(`	tenant, id := newUser(t), newKey(t)
	killHelper(t, "^TestHelperConsumer%[1]s$", "YOURSERVICE_CONSUMER_TENANT="+tenant, "YOURSERVICE_CONSUMER_ID="+id)
	exec := testExecutor(t, shortConfig(holderLease, time.Hour))
	var runs atomic.Int64
	// While the dead consumer's lease runs: in progress. Once it ends: taken over.
	deadline := time.Now().Add(time.Minute)
	for {
		err := %[2]s
		var busy *idempotency.InProgressError
		if !errors.As(err, &busy) {
			if err != nil {
				t.Fatalf("after the consumer was killed: %%v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still in progress a minute after the consumer was killed")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if err := %[2]s; err != nil || runs.Load() != 1 {
		t.Errorf("after the takeover: %%v, %%d runs; want the message handled once", err, runs.Load())
	}
`, n, call("tenant", fields))}
	}
	sc["ExpiredKeyIsNew"] = [2]string{"a redelivery after the record's retention: handled as a new message, once", fmt.Sprintf(`	exec := testExecutor(t, shortConfig(time.Second, 2*time.Second))
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	// Replayed until the record expires; then handled as a new message.
	deadline := time.Now().Add(time.Minute)
	for runs.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%%d runs a minute after a 2s retention, want a second run once it expired", runs.Load())
		}
		if err := %s; err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if runs.Load() != 2 {
		t.Errorf("%%d runs, want 2: one per life of the record", runs.Load())
	}
`, call("tenant", fields))}
	sc["OtherScopeIsolated"] = [2]string{"the same message id under another tenant: its own run, never the first tenant's record", fmt.Sprintf(`	exec := testExecutor(t, Config())
	var runs atomic.Int64
	id := newKey(t)
	for _, tenant := range []string{newUser(t), newUser(t)} {
		if err := %s; err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("one message id under two tenants ran the action %%d times, want once per tenant", runs.Load())
	}
`, call("tenant", fields))}
	sc["StoreDownFailsClosed"] = [2]string{"the store unreachable: an error, and the action never runs", fmt.Sprintf(`	exec := downExecutor(t)
	var runs atomic.Int64
	tenant, id := newUser(t), newKey(t)
	if err := %s; err == nil || runs.Load() != 0 {
		t.Errorf("store unreachable: %%v, %%d runs; want an error and no run", err, runs.Load())
	}
`, call("tenant", fields))}
	return sc
}

// execHelperGo is the consumer process that an executor consumer's
// HolderKilledReclaimed test kills (%[1]s its Go name, %[2]s its Consume
// call).
const execHelperGo = `
// TestHelperConsumer%[1]s is the consumer that Test%[1]sHolderKilledReclaimed
// kills: this test binary run again; it claims the message and hangs in
// its action.
func TestHelperConsumer%[1]s(t *testing.T) {
	tenant, id := os.Getenv("YOURSERVICE_CONSUMER_TENANT"), os.Getenv("YOURSERVICE_CONSUMER_ID")
	if id == "" {
		t.Skip("the consumer process of Test%[1]sHolderKilledReclaimed; run by it")
	}
	exec := testExecutor(t, shortConfig(holderLease, time.Hour))
	_ = %[2]s
}
`

// goExecHelpers are D6's helpers for consumers handled by the executor:
// an executor on the tests' store, one on a store that cannot be reached,
// and an action that counts its runs.
func goExecHelpers(d *Document, imports map[string]bool) string {
	common := `
// countRuns stands in for your consumer's work: it counts its runs (the
// effect the scenarios count).
func countRuns(runs *atomic.Int64) idempotency.Action {
	return func(context.Context) (idempotency.Response, error) {
		runs.Add(1)
		return idempotency.Response{}, nil
	}
}
`
	if d.Store == StoreRedis {
		imports[`"github.com/payonce/payonce/idempotency/redisstore"`] = true
		return common + `
// testExecutor is an executor with cfg on the Redis of REDIS_URL.
func testExecutor(t *testing.T, cfg *idempotency.Config) *idempotency.Executor {
	t.Helper()
	return executorOn(t, testRedis(t), cfg)
}

// downExecutor is an executor on a Redis that is not there.
func downExecutor(t *testing.T) *idempotency.Executor {
	t.Helper()
	return executorOn(t, downRedis(t), Config())
}

func executorOn(t *testing.T, rdb *redis.Client, cfg *idempotency.Config) *idempotency.Executor {
	t.Helper()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	exec, err := idempotency.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return exec
}
`
	}
	return common + `
// testExecutor is an executor with cfg on testStore.
func testExecutor(t *testing.T, cfg *idempotency.Config) *idempotency.Executor {
	t.Helper()
	exec, err := idempotency.New(testStore(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return exec
}

// downExecutor is an executor on a store that cannot be reached.
func downExecutor(t *testing.T) *idempotency.Executor {
	t.Helper()
	exec, err := idempotency.New(downStore{memstore.New(nil)}, Config())
	if err != nil {
		t.Fatal(err)
	}
	return exec
}
`
}

// consumeCall is D3's Consume of consumer x called with inbox in, the
// message id (consumeTarget), significant fields flds and handler handle.
func consumeCall(d *Document, x ActionPlan, in, flds, handle string) string {
	fn, ids := consumeTarget(d, x)
	return fmt.Sprintf("%s(context.Background(), %s, %s%s, %s)", fn, in, ids, flds, handle)
}

// consumerFields is the literal of consumer x's significant fields in the
// scenarios (", XFields{...}"; empty without fields), and
// consumerOtherFields the same with its first field changed.
func consumerFields(x ActionPlan) string { return fieldsLiteral(x, false) }

func consumerOtherFields(x ActionPlan) string { return fieldsLiteral(x, true) }

func fieldsLiteral(x ActionPlan, other bool) string {
	if len(x.Fields) == 0 {
		return ""
	}
	var kv []string
	for i, f := range x.Fields {
		// Values D4's fingerprint accepts: an int64 for a quantity, a
		// decimal for an amount (see fingerprintGo).
		v, v2 := fmt.Sprintf("%q", "v-"+f), fmt.Sprintf("%q", "other-"+f)
		switch {
		case strings.Contains(f, "amount"):
			v, v2 = `"10.00"`, `"20.00"`
		case strings.Contains(f, "qty") || strings.Contains(f, "quantity"):
			v, v2 = "1", "2"
		}
		if other && i == 0 {
			v = v2
		}
		kv = append(kv, goName(f)+": "+v)
	}
	return ", " + goName(x.Name) + "Fields{" + strings.Join(kv, ", ") + "}"
}

// consumerCall is consumeCall with the scenarios' significant fields.
func consumerCall(d *Document, x ActionPlan, handle string) string {
	return consumeCall(d, x, "in", consumerFields(x), handle)
}

// consumerHelperGo is the consumer process that a consumer's
// HolderKilledReclaimed test kills (%[1]s its Go name, %[2]s its Consume
// call).
const consumerHelperGo = `
// TestHelperConsumer%[1]s is the consumer that Test%[1]sHolderKilledReclaimed
// kills: this test binary run again; it writes its effect in the message's
// transaction and hangs before that transaction commits.
func TestHelperConsumer%[1]s(t *testing.T) {
	id := os.Getenv("YOURSERVICE_CONSUMER_ID")
	if id == "" {
		t.Skip("the consumer process of Test%[1]sHolderKilledReclaimed; run by it")
	}
	in, _ := testInbox(t, nil)
	_, _ = %[2]s
}
`

// goInboxHelpers are D6's helpers for consumers handled by the inbox.
const goInboxHelpers = `
var (
	effectsOnce sync.Once
	effectsErr  error
)

// testInbox is an inbox on the test database, and its pool. Effects are
// rows of d6_effects, written by the handler in the message's transaction.
func testInbox(t *testing.T, cfg *inbox.Config) (*inbox.Inbox[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	pool := testPool(t)
	effectsOnce.Do(func() {
		_, effectsErr = pool.Exec(context.Background(), "CREATE TABLE IF NOT EXISTS d6_effects (message TEXT NOT NULL)")
	})
	if effectsErr != nil {
		t.Fatal(effectsErr)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in, pool
}

// effect stands in for your handler: one row per run, in the message's
// transaction (the effect the scenarios count).
func effect(message string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO d6_effects (message) VALUES ($1)", message)
		return err
	}
}

// effects counts the committed effects of message.
func effects(t *testing.T, pool *pgxpool.Pool, message string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM d6_effects WHERE message = $1", message).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
`
