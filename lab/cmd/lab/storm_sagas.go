package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/lab/internal/keyscan"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/providers/fakes"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The storm's saga phase: checkouts through the worker's POST /checkout,
// each a saga of three steps (reserve stock, charge with the sub-key
// "<key>_charge", record the order), across the providers and their
// faults. The skus are scarce (fewer units than checkouts), some payment
// methods decline, and one sku is recalled: its orders are refused at the
// confirm step, after the charge, so that its sagas refund. Customers
// double-click and give up early; midway the worker is killed again. Then
// every checkout is retried with its key until final, and those whose
// clients gave up are read with GET /checkout/{key} once the worker's
// recovery job has finished them.
//
// The checks (sagaResult.check), each a PROBLEM that fails the demo:
// every recorded saga ends COMPLETED or ROLLED_BACK (NEEDS_REVIEW only
// with a reason); every answer for a key agrees with the saga's stored
// end; no sku is ever sold beyond its stock (sampled all along, and at
// the end from the example's tables inventory, reservations and orders);
// a completed checkout has exactly one charge at its provider and one
// order; a rolled-back one keeps no money (its charge, if any, refunded)
// and no order; and what each provider's fake holds in the phase's
// currency is exactly the completed checkouts' amounts.

// sagaCurrency is the saga phase's currency, which the storm's payments
// never use: what the providers hold in it is the checkouts' alone.
const sagaCurrency = "CHF"

// recalledSKU is the sku whose orders the worker refuses at the confirm
// step (PAYONCE_CHECKOUT_FAIL_CONFIRM_SKU): its checkouts are charged,
// then refunded and released by the saga's compensation.
const recalledSKU = "demo-recalled"

// sagaSKU is a sku of the phase: its share of the checkouts and its stock
// for n checkouts.
type sagaSKU struct {
	name   string
	weight int
	stock  func(n int) int
}

// The scarce skus hold about two thirds of the units their checkouts ask
// for (92% of the checkouts, a quarter of them for two units): fewer units
// than checkouts.
var sagaSKUs = []sagaSKU{
	{"demo-book", 35, func(n int) int { return max(1, n/4) }},
	{"demo-mug", 32, func(n int) int { return max(1, n*3/10) }},
	{"demo-pen", 25, func(n int) int { return max(1, n/5) }},
	{recalledSKU, 8, func(n int) int { return 2 * n }},
}

// sagaCheckout is one checkout and what its clients saw.
type sagaCheckout struct {
	customer, key, sku, provider, method string
	qty                                  int
	cents                                int64
	// abandoned: the client double-clicks with little patience and never
	// retries; it reads the checkout's end with GET /checkout/{key}.
	abandoned bool
	sends     int

	mu sync.Mutex
	// answers: the distinct final answers seen ("COMPLETED order 12",
	// "ROLLED_BACK reserve"), by POST or GET.
	answers    map[string]bool
	unexpected []string
	// clientFinal: a send of the checkout's first burst had its final
	// answer.
	clientFinal bool
	// missing: GET /checkout/{key} answered 404 for a while after every
	// client had left: no request of this key got as far as recording
	// the saga.
	missing bool
	// recovered: GET /checkout/{key} found the saga unfinished after
	// every client had left, and later finished: the worker's recovery
	// job drove it to its end.
	recovered bool
}

func (c *sagaCheckout) body() string {
	return fmt.Sprintf(`{"sku": %q, "qty": %d, "amount": "%d.%02d", "currency": %q, "payment_method": %q, "provider": %q, "recipient": "acct_shop"}`,
		c.sku, c.qty, c.cents/100, c.cents%100, sagaCurrency, c.method, c.provider)
}

// record notes an answer of POST /checkout (or, get, of GET
// /checkout/{key}), and says whether it is final.
func (c *sagaCheckout) record(get bool, code int, m map[string]any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	status, _ := m["status"].(string) // a problem's "status" is the saga's when it carries one
	typ, _ := m["type"].(string)
	switch {
	case status == "COMPLETED" || status == "ROLLED_BACK" || status == "NEEDS_REVIEW":
		// The package doc's codes of each end.
		if ok := map[string]bool{"COMPLETED 201": true, "ROLLED_BACK 402": true, "ROLLED_BACK 409": true,
			"ROLLED_BACK 422": true, "NEEDS_REVIEW 409": true}[fmt.Sprintf("%s %d", status, code)]; !ok && !(get && code == 200) {
			c.unexpected = append(c.unexpected, fmt.Sprintf("%d %s", code, status))
		}
		a := status
		if step, _ := m["failed_step"].(string); step != "" {
			a += " " + step
		}
		if o, ok := m["order"].(map[string]any); ok { // POST's answer
			a += fmt.Sprintf(" order %v", o["order_id"])
		} else if status == "COMPLETED" { // GET's: the confirm step's output
			steps, _ := m["steps"].([]any)
			for _, x := range steps {
				if st, _ := x.(map[string]any); st["name"] == "confirm" {
					o, _ := st["output"].(map[string]any)
					a += fmt.Sprintf(" order %v", o["order_id"])
				}
			}
		}
		c.answers[a] = true
		return true
	case code == 202, code == 503, get && (code == 200 || code == 404):
		// not finished, unavailable; a saga still running, or not (yet)
		// recorded
	case code == 409 && strings.HasSuffix(typ, "/request-in-progress"):
	default:
		c.unexpected = append(c.unexpected, fmt.Sprintf("%d %s", code, typ))
	}
	return false
}

type sagaResult struct {
	checkouts []*sagaCheckout
	stock     map[string]int // sku -> initial stock
	killed    bool
	// samples of the stock taken during the phase, and the violations
	// seen in them
	samples    int
	violations []string

	// Set by check.
	completed, rolledBack, review, outOfStock, declined, refunded, otherRollback int
	givenUp, finishedWithoutClient, recovered, neverRecorded, sold, sellable     int
	reviews, problems                                                            []string
	stockOK, chargesOK                                                           bool
}

// sagaPhase runs the checkouts: n of them by n/5 customers, with the
// worker killed once midway when kill is set. Their keys join keys before
// any is sent.
func sagaPhase(ctx context.Context, hc *http.Client, base string, pool *pgxpool.Pool, w *worker, kill bool,
	providers []string, n int, rng *rand.Rand, keys *keyscan.Set) (*sagaResult, error) {
	res := &sagaResult{stock: map[string]int{}, killed: kill}
	total := 0
	for _, s := range sagaSKUs {
		total += s.weight
		res.stock[s.name] = s.stock(n)
		code, _, err := send(hc, base+"/inventory", "ops", "", fmt.Sprintf(`{"sku": %q, "stock": %d}`, s.name, res.stock[s.name]), 10*time.Second)
		if err != nil || code != http.StatusOK {
			return nil, fmt.Errorf("setting the stock of %s: %d %v", s.name, code, err)
		}
	}
	customers := max(1, n/5)
	byCustomer := map[string][]*sagaCheckout{}
	for i := range n {
		x := rng.IntN(total)
		sku := sagaSKUs[0].name
		for _, s := range sagaSKUs {
			if x < s.weight {
				sku = s.name
				break
			}
			x -= s.weight
		}
		method := stripetest.PaymentMethodVisa // the fakes share the test cards' names
		switch x := rng.IntN(100); {
		case x < 8:
			method = stripetest.PaymentMethodDeclined
		case x < 12:
			method = stripetest.PaymentMethodInsufficientFunds
		case x < 15:
			method = stripetest.PaymentMethodAuthenticationRequired
		}
		qty := 1
		if rng.IntN(4) == 0 {
			qty = 2
		}
		c := &sagaCheckout{customer: fmt.Sprintf("shopper_%03d", i%customers), key: fmt.Sprintf("cart-%05d", i),
			sku: sku, provider: providers[i%len(providers)], method: method, qty: qty, cents: 500 + rng.Int64N(11500),
			abandoned: i%8 == 5, sends: 2 + rng.IntN(2), answers: map[string]bool{}}
		keys.Add(c.key)
		res.checkouts = append(res.checkouts, c)
		byCustomer[c.customer] = append(byCustomer[c.customer], c)
	}

	// The stock, sampled all along: never below zero, and every unit
	// either left, held by a reservation or sold.
	stopSampling := make(chan struct{})
	sampled := make(chan error, 1)
	go func() { sampled <- res.sample(ctx, pool, stopSampling) }()

	var started atomic.Int64
	killed := make(chan error, 1)
	if kill {
		go func() {
			for started.Load() < int64(n)*2/5 {
				time.Sleep(5 * time.Millisecond)
			}
			killed <- w.crash()
		}()
	} else {
		killed <- nil
	}
	var wg sync.WaitGroup
	for cust, cs := range byCustomer {
		wg.Add(1)
		seed := rng.Uint64()
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(len(cust))))
			for _, c := range cs {
				started.Add(1)
				res.impatient(hc, base, c, r)
			}
		}()
	}
	wg.Wait()
	if err := <-killed; err != nil {
		close(stopSampling)
		<-sampled
		return nil, fmt.Errorf("restarting the worker: %w", err)
	}

	// Every checkout to its end: retried with its key by its client, or,
	// for those given up, read until the recovery job has finished them.
	var wg2 sync.WaitGroup
	for _, c := range res.checkouts {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if c.abandoned {
				res.await(hc, base, c)
			} else {
				res.settle(hc, base, c)
			}
		}()
	}
	wg2.Wait()
	close(stopSampling)
	if err := <-sampled; err != nil {
		return nil, err
	}
	return res, nil
}

// impatient sends a checkout 2 or 3 times: a double click (two at once),
// then a third a few milliseconds later; one send in four gives up after a
// few milliseconds, and every send of an abandoned checkout does.
func (res *sagaResult) impatient(hc *http.Client, base string, c *sagaCheckout, r *rand.Rand) {
	var wg sync.WaitGroup
	for i := range c.sends {
		timeout := 10 * time.Second
		switch {
		case c.abandoned:
			timeout = time.Duration(10+r.IntN(150)) * time.Millisecond
		case r.IntN(4) == 0:
			timeout = time.Duration(5+r.IntN(60)) * time.Millisecond
		}
		if i == 2 {
			time.Sleep(time.Duration(5+r.IntN(30)) * time.Millisecond)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, m, err := send(hc, base+"/checkout", c.customer, c.key, c.body(), timeout); err == nil && c.record(false, code, m) {
				c.mu.Lock()
				c.clientFinal = true
				c.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// settle retries a checkout with its key until its answer is final (at
// least once: a finished checkout's answer is replayed).
func (res *sagaResult) settle(hc *http.Client, base string, c *sagaCheckout) {
	deadline := time.Now().Add(45 * time.Second)
	for backoff := 50 * time.Millisecond; time.Now().Before(deadline); backoff = min(backoff*2, 500*time.Millisecond) {
		code, m, err := send(hc, base+"/checkout", c.customer, c.key, c.body(), 15*time.Second)
		if err == nil && c.record(false, code, m) {
			return
		}
		time.Sleep(backoff)
	}
}

// await reads a given-up checkout until it is final, or until it has been
// absent for 2s (none of its sends got as far as recording it; they have
// all ended).
func (res *sagaResult) await(hc *http.Client, base string, c *sagaCheckout) {
	deadline := time.Now().Add(45 * time.Second)
	var absentSince time.Time
	unfinished := false
	for time.Now().Before(deadline) {
		code, m, err := get(hc, base+"/checkout/"+c.key, c.customer)
		if err == nil {
			if c.record(true, code, m) {
				if unfinished {
					c.mu.Lock()
					c.recovered = true
					c.mu.Unlock()
				}
				return
			}
			unfinished = unfinished || code == http.StatusOK
			if code == http.StatusNotFound {
				if absentSince.IsZero() {
					absentSince = time.Now()
				} else if time.Since(absentSince) > 2*time.Second {
					c.mu.Lock()
					c.missing = true
					c.mu.Unlock()
					return
				}
			} else {
				absentSince = time.Time{}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get reads url as user.
func get(hc *http.Client, url, user string) (int, map[string]any, error) {
	return request(hc, http.MethodGet, url, user, "", "", 15*time.Second)
}

// stockSQL reads, per sku in one snapshot, what is left, held by
// reservations and sold (reservations confirmed).
const stockSQL = `SELECT i.sku, i.stock,
       coalesce(sum(r.qty) FILTER (WHERE r.status = 'HELD'), 0)::int,
       coalesce(sum(r.qty) FILTER (WHERE r.status = 'CONFIRMED'), 0)::int
  FROM inventory i LEFT JOIN reservations r ON r.sku = i.sku
 GROUP BY i.sku, i.stock`

type skuState struct{ left, held, sold int }

func readStock(ctx context.Context, pool *pgxpool.Pool) (map[string]skuState, error) {
	rows, err := pool.Query(ctx, stockSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]skuState{}
	for rows.Next() {
		var sku string
		var s skuState
		if err := rows.Scan(&sku, &s.left, &s.held, &s.sold); err != nil {
			return nil, err
		}
		out[sku] = s
	}
	return out, rows.Err()
}

// stockViolations returns what is wrong with a snapshot of the stock.
func (res *sagaResult) stockViolations(snap map[string]skuState) []string {
	var out []string
	for _, s := range sagaSKUs {
		initial, st := res.stock[s.name], snap[s.name]
		if st.left < 0 || st.sold > initial || st.left+st.held+st.sold != initial {
			out = append(out, fmt.Sprintf("%s: stock %d, %d left, %d held, %d sold", s.name, initial, st.left, st.held, st.sold))
		}
	}
	return out
}

// sample reads the stock every 50ms until stop is closed.
func (res *sagaResult) sample(ctx context.Context, pool *pgxpool.Pool, stop <-chan struct{}) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		snap, err := readStock(ctx, pool)
		if err != nil {
			return fmt.Errorf("reading the stock: %w", err)
		}
		res.samples++
		for _, v := range res.stockViolations(snap) {
			if len(res.violations) < 10 {
				res.violations = append(res.violations, v)
			}
		}
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
	}
}

// check compares every checkout's end with the example's tables, payonce's
// intents and what the providers' fakes hold. It runs once the providers'
// webhooks are delivered and the reconciler is done.
func (res *sagaResult) check(ctx context.Context, pool *pgxpool.Pool, fk *fakes.Set) error {
	type sagaRow struct{ status, failedStep, reason string }
	sagas := map[[2]string]sagaRow{}
	rows, err := pool.Query(ctx, `SELECT scope, saga_key, status, coalesce(failed_step, ''), coalesce(reason, '') FROM sagas WHERE definition = 'checkout'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k [2]string
		var s sagaRow
		if err := rows.Scan(&k[0], &k[1], &s.status, &s.failedStep, &s.reason); err != nil {
			return err
		}
		sagas[k] = s
	}
	if rows.Err() != nil {
		return rows.Err()
	}
	type orderRow struct {
		sku      string
		qty, n   int
		provider string
	}
	orders := map[[2]string]orderRow{}
	rows, err = pool.Query(ctx, `SELECT user_id, order_key, sku, qty, provider FROM orders`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k [2]string
		var o orderRow
		if err := rows.Scan(&k[0], &k[1], &o.sku, &o.qty, &o.provider); err != nil {
			return err
		}
		o.n = orders[k].n + 1
		orders[k] = o
	}
	if rows.Err() != nil {
		return rows.Err()
	}
	reservations := map[[2]string]string{} // (user, "<key>_reserve") -> status
	rows, err = pool.Query(ctx, `SELECT user_id, reservation_key, status FROM reservations`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k [2]string
		var status string
		if err := rows.Scan(&k[0], &k[1], &status); err != nil {
			return err
		}
		reservations[k] = status
	}
	if rows.Err() != nil {
		return rows.Err()
	}
	// payonce's intents in the phase's currency: the charges by key, the
	// refunds ("<status> <cents>") by their charge's key.
	charges, refunds := map[[2]string]string{}, map[[2]string][]string{}
	rows, err = pool.Query(ctx, `SELECT user_id, idempotency_key, kind, status, (amount * 100)::bigint, coalesce(charge_key, '')
  FROM payment_intents WHERE currency = $1`, sagaCurrency)
	if err != nil {
		return err
	}
	for rows.Next() {
		var user, key, kind, status, chargeKey string
		var cents int64
		if err := rows.Scan(&user, &key, &kind, &status, &cents, &chargeKey); err != nil {
			return err
		}
		if kind == "REFUND" {
			k := [2]string{user, chargeKey}
			refunds[k] = append(refunds[k], fmt.Sprintf("%s %d", status, cents))
		} else {
			charges[[2]string{user, key}] = status
		}
	}
	if rows.Err() != nil {
		return rows.Err()
	}

	problem := func(format string, args ...any) { res.problems = append(res.problems, fmt.Sprintf(format, args...)) }
	var stockProblems, chargeProblems int
	expected := map[string]int64{} // provider -> cents the completed checkouts charged
	seen := map[[2]string]bool{}
	for _, c := range res.checkouts {
		id := c.customer + "/" + c.key
		k := [2]string{c.customer, c.key}
		seen[k] = true
		if c.abandoned && !c.clientFinal {
			res.givenUp++
		}
		for _, u := range c.unexpected {
			problem("checkout %s: unexpected answer %s", id, u)
		}
		chargeKey, err := payments.ChargeKey(c.customer, c.key+"_charge")
		if err != nil {
			return err
		}
		ck := [2]string{c.customer, chargeKey}
		atProvider := fk.Charges(c.provider, chargeKey)
		s, recorded := sagas[k]
		o, ordered := orders[k]
		reservation := reservations[[2]string{c.customer, c.key + "_reserve"}]
		if !recorded {
			if !c.abandoned || !c.missing || len(c.answers) > 0 {
				problem("checkout %s: no saga recorded (answers %v)", id, slices.Sorted(maps.Keys(c.answers)))
			}
			res.neverRecorded++
			if atProvider > 0 || ordered || reservation != "" || charges[ck] != "" {
				chargeProblems++
				problem("checkout %s: no saga, yet %d charge(s), order %v, reservation %q", id, atProvider, ordered, reservation)
			}
			continue
		}
		end := s.status
		if s.failedStep != "" {
			end += " " + s.failedStep
		}
		for a := range c.answers {
			if a != end && !strings.HasPrefix(a, end+" order ") {
				problem("checkout %s: answered %q, but the saga ended %s", id, a, end)
			}
		}
		if len(c.answers) > 1 {
			problem("checkout %s: %d different final answers %v", id, len(c.answers), slices.Sorted(maps.Keys(c.answers)))
		}
		if len(c.answers) == 0 && !c.abandoned {
			problem("checkout %s: no final answer to its client", id)
		}
		if c.abandoned && !c.clientFinal && s.status != "RUNNING" && s.status != "COMPENSATING" {
			res.finishedWithoutClient++
			if c.recovered {
				res.recovered++
			}
		}
		switch s.status {
		case "COMPLETED":
			res.completed++
			expected[c.provider] += c.cents
			if atProvider != 1 || charges[ck] != "SUCCEEDED" || len(refunds[ck]) > 0 {
				chargeProblems++
				problem("checkout %s completed with %d charge(s) at %s (intent %q, refunds %v)", id, atProvider, c.provider, charges[ck], refunds[ck])
			}
			if !ordered || o.n != 1 || o.sku != c.sku || o.qty != c.qty || o.provider != c.provider || reservation != "CONFIRMED" {
				stockProblems++
				problem("checkout %s completed with order %+v, reservation %q", id, o, reservation)
			}
		case "ROLLED_BACK":
			res.rolledBack++
			switch s.failedStep {
			case "reserve":
				res.outOfStock++
			case "charge":
				res.declined++
			case "confirm":
				res.refunded++
			default:
				res.otherRollback++
			}
			if ordered || (reservation != "" && reservation != "RELEASED") {
				stockProblems++
				problem("checkout %s rolled back with an order (%v) or its reservation %q", id, ordered, reservation)
			}
			switch st := charges[ck]; {
			case atProvider > 1:
				chargeProblems++
				problem("checkout %s: %d charges at %s", id, atProvider, c.provider)
			case s.failedStep == "reserve" && (atProvider > 0 || st != ""):
				chargeProblems++
				problem("checkout %s out of stock, yet charged (%d at %s, intent %q)", id, atProvider, c.provider, st)
			case st == "SUCCEEDED" && !slices.Contains(refunds[ck], fmt.Sprintf("SUCCEEDED %d", c.cents)):
				chargeProblems++
				problem("checkout %s rolled back, its charge not refunded (refunds %v)", id, refunds[ck])
			case st == "PENDING" || st == "UNKNOWN":
				chargeProblems++
				problem("checkout %s rolled back with its charge %s", id, st)
			}
		case "NEEDS_REVIEW":
			res.review++
			res.reviews = append(res.reviews, fmt.Sprintf("%s (%s): %s", id, s.failedStep, s.reason))
			if s.reason == "" {
				problem("checkout %s in review without a reason", id)
			}
		default:
			problem("checkout %s never finished: %s", id, s.status)
		}
	}
	for k, s := range sagas {
		if !seen[k] {
			problem("a saga no client sent: %s/%s %s", k[0], k[1], s.status)
		}
	}

	// The stock at the end, and as sampled all along.
	snap, err := readStock(ctx, pool)
	if err != nil {
		return err
	}
	soldOrders := map[string]int{}
	for _, o := range orders {
		soldOrders[o.sku] += o.qty
	}
	for _, s := range sagaSKUs {
		st := snap[s.name]
		if s.name != recalledSKU {
			res.sold += st.sold
			res.sellable += res.stock[s.name]
		}
		if st.held != 0 || st.sold != soldOrders[s.name] {
			stockProblems++
			problem("%s: %d units still held, %d sold but %d in orders", s.name, st.held, st.sold, soldOrders[s.name])
		}
	}
	for _, v := range res.stockViolations(snap) {
		stockProblems++
		problem("stock at the end: %s", v)
	}
	for _, v := range res.violations {
		stockProblems++
		problem("stock during the phase: %s", v)
	}

	// What the providers hold in the phase's currency: the completed
	// checkouts' amounts, nothing for the rolled-back ones.
	for _, name := range fk.Providers() {
		if held := fk.Net(name)[sagaCurrency]; held != expected[name] {
			chargeProblems++
			problem("%s holds %d.%02d %s, the completed checkouts charged %d.%02d", name, held/100, held%100, sagaCurrency,
				expected[name]/100, expected[name]%100)
		}
	}
	res.stockOK, res.chargesOK = stockProblems == 0, chargeProblems == 0
	return nil
}

// line is the saga phase's summary line.
func (res *sagaResult) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  sagas: %d checkouts", len(res.checkouts))
	if res.killed {
		b.WriteString(" (the worker killed once more, midway)")
	}
	fmt.Fprintf(&b, ": %d COMPLETED, %d ROLLED_BACK (out of stock %d, declined %d, refunded at confirm %d",
		res.completed, res.rolledBack, res.outOfStock, res.declined, res.refunded)
	if res.otherRollback > 0 {
		fmt.Fprintf(&b, ", other %d", res.otherRollback)
	}
	fmt.Fprintf(&b, "), %d NEEDS_REVIEW", res.review)
	fmt.Fprintf(&b, "; %d given up by their clients: %d finished without them (%d by the recovery job), %d never recorded",
		res.givenUp, res.finishedWithoutClient, res.recovered, res.neverRecorded)
	if res.stockOK {
		fmt.Fprintf(&b, "; stock never oversold (%d of %d units sold, %d samples)", res.sold, res.sellable, res.samples)
	} else {
		b.WriteString("; STOCK PROBLEMS below")
	}
	if res.chargesOK {
		b.WriteString("; one charge per completed checkout, none kept for a rolled-back one")
	} else {
		b.WriteString("; CHARGE PROBLEMS below")
	}
	return b.String()
}
