package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/examples/checkout/service"
	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/pgtest"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
	"github.com/payonce/payonce/saga"
)

// checkoutOf is a checkout request's body: qty of sku for 20.00 EUR each
// time, paid with pm through the Stripe fake.
func checkoutOf(sku string, qty int, pm string) string {
	return fmt.Sprintf(`{"sku": %q, "qty": %d, "amount": "20.00", "currency": "EUR", "payment_method": %q, "provider": "stripe", "recipient": "acct_shop"}`,
		sku, qty, pm)
}

// shop is a checkout world: the service, its database, a sku in stock.
type shop struct {
	env
	pool *pgxpool.Pool
}

func openShop(t *testing.T, configure func(*service.Config)) shop {
	t.Helper()
	e := startWith(t, configure)
	return shop{env: e, pool: pgtest.PoolURL(t, e.db)}
}

func (s shop) setStock(t *testing.T, sku string, n int) {
	t.Helper()
	if a := s.do(t, "POST", "/inventory", "ops", "", fmt.Sprintf(`{"sku": %q, "stock": %d}`, sku, n)); a.code != 200 || a.body["stock"] != float64(n) {
		t.Fatalf("set stock: %d %v", a.code, a.body)
	}
}

func (s shop) stock(t *testing.T, sku string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT stock FROM inventory WHERE sku = $1`, sku).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rows counts the rows of table (reservations or orders) for sku, by
// reservation status when status is set.
func (s shop) rows(t *testing.T, table, sku, status string) int {
	t.Helper()
	q := `SELECT count(*) FROM ` + table + ` WHERE sku = $1`
	args := []any{sku}
	if status != "" {
		q += ` AND status = $2`
		args = append(args, status)
	}
	var n int
	if err := s.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// providerCounts are the Stripe objects of one checkout's charge and
// refund: the ground truth.
func (s shop) providerCounts(t *testing.T, user, key string) (charges, refunds int) {
	t.Helper()
	ck, err := idempotency.ComposeKey(user, "charge", saga.SubKey(key, service.StepCharge))
	if err != nil {
		t.Fatal(err)
	}
	rk, err := idempotency.ComposeKey(user, "refund", saga.CompensationKey(key, service.StepCharge))
	if err != nil {
		t.Fatal(err)
	}
	return s.fake.CountsByMetadata(paystripe.MetadataKey, ck).PaymentIntents, s.fake.CountsByMetadata(paystripe.MetadataKey, rk).Refunds
}

// booksBalanced checks the ledger: every currency's postings sum to zero,
// and the Stripe cash account holds what the fake says it holds.
func (s shop) booksBalanced(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var unbalanced int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT currency FROM ledger_postings GROUP BY currency HAVING sum(amount) <> 0) x`).Scan(&unbalanced); err != nil {
		t.Fatal(err)
	}
	var cash string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(p.amount), 0)::text FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.code = 'provider:stripe' AND a.currency = 'EUR'`).Scan(&cash); err != nil {
		t.Fatal(err)
	}
	net := s.fake.Totals()["eur"].Net
	if want := fmt.Sprintf("%d.%02d", net/100, net%100); unbalanced != 0 || cash != want && !(net == 0 && cash == "0") {
		t.Fatalf("books: %d unbalanced currencies, provider:stripe holds %s EUR, the fake %s", unbalanced, cash, want)
	}
}

// try is e.do for goroutines: it returns its error.
func (e env) try(method, path, user, key, body string) (answer, error) {
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+user)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		return a, fmt.Errorf("body %q is not JSON: %v", raw, err)
	}
	return a, nil
}

func problemType(a answer) string {
	s, _ := a.body["type"].(string)
	return strings.TrimPrefix(s, "https://payonce.dev/problems/")
}

// stepStatuses lists the steps' statuses of a checkout answer.
func stepStatuses(a answer) string {
	steps, _ := a.body["steps"].([]any)
	var out []string
	for _, x := range steps {
		st, _ := x.(map[string]any)
		out = append(out, fmt.Sprint(st["name"], ":", st["status"]))
	}
	return strings.Join(out, " ")
}

func TestCheckoutCompletesReplaysAndReads(t *testing.T) {
	t.Parallel()
	s := openShop(t, nil)
	s.setStock(t, "book", 3)
	body := checkoutOf("book", 2, "pm_card_visa")
	first := s.do(t, "POST", "/checkout", "alice", "cart-1", body)
	order, _ := first.body["order"].(map[string]any)
	if first.code != 201 || first.body["status"] != "COMPLETED" || order["order_id"] == nil || order["provider_id"] == "" ||
		first.header.Get("Idempotent-Replayed") != "" || stepStatuses(first) != "reserve:DONE charge:DONE confirm:DONE" {
		t.Fatalf("checkout: %d %s", first.code, first.raw)
	}
	again := s.do(t, "POST", "/checkout", "alice", "cart-1", body)
	if again.code != 201 || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.raw, first.raw) {
		t.Fatalf("replay: %d %v %s, want the first answer %s", again.code, again.header, again.raw, first.raw)
	}
	got := s.do(t, "GET", "/checkout/cart-1", "alice", "", "")
	steps, _ := got.body["steps"].([]any)
	if got.code != 200 || got.body["status"] != "COMPLETED" || got.body["saga"] != "checkout" || got.body["finished_at"] == nil || len(steps) != 3 {
		t.Fatalf("read: %d %s", got.code, got.raw)
	}
	if kind := steps[1].(map[string]any)["kind"]; kind != "REMOTE" || stepStatuses(got) != stepStatuses(first) {
		t.Fatalf("read steps: %s", got.raw)
	}
	if other := s.do(t, "GET", "/checkout/cart-1", "mallory", "", ""); other.code != 404 {
		t.Fatalf("another caller reads the checkout: %d %s", other.code, other.raw)
	}
	if none := s.do(t, "GET", "/checkout/cart-none", "alice", "", ""); none.code != 404 {
		t.Fatalf("unknown checkout: %d %s", none.code, none.raw)
	}
	if noAuth := s.do(t, "GET", "/checkout/cart-1", "", "", ""); noAuth.code != 401 {
		t.Fatalf("unauthenticated read: %d %s", noAuth.code, noAuth.raw)
	}

	// The same key with another quantity is refused and changes nothing.
	mismatch := s.do(t, "POST", "/checkout", "alice", "cart-1", checkoutOf("book", 1, "pm_card_visa"))
	if mismatch.code != 409 || problemType(mismatch) != "idempotency-key-reused" {
		t.Fatalf("same key, other body: %d %s", mismatch.code, mismatch.raw)
	}
	// Field order and whitespace are not significant.
	reordered := `{"recipient":"acct_shop","provider":"stripe","payment_method":"pm_card_visa","currency":"EUR","amount":"20.00","qty":2,"sku":"book"}`
	if a := s.do(t, "POST", "/checkout", "alice", "cart-1", reordered); a.code != 201 || !bytes.Equal(a.raw, first.raw) {
		t.Fatalf("same body reordered: %d %s", a.code, a.raw)
	}
	if c, r := s.providerCounts(t, "alice", "cart-1"); c != 1 || r != 0 {
		t.Fatalf("%d charges and %d refunds at Stripe, want 1 and 0", c, r)
	}
	if n := s.stock(t, "book"); n != 1 {
		t.Fatalf("stock %d, want 1", n)
	}
	if o, held := s.rows(t, "orders", "book", ""), s.rows(t, "reservations", "book", "CONFIRMED"); o != 1 || held != 1 {
		t.Fatalf("%d orders and %d confirmed reservations, want 1 and 1", o, held)
	}
	s.booksBalanced(t)
}

func TestCheckoutOutOfStockChargesNothing(t *testing.T) {
	t.Parallel()
	s := openShop(t, nil)
	s.setStock(t, "lamp", 1)
	for i, c := range []struct{ key, body string }{
		{"cart-2", checkoutOf("lamp", 2, "pm_card_visa")},
		{"cart-2", checkoutOf("lamp", 2, "pm_card_visa")}, // its replay
		{"cart-3", checkoutOf("unicorn", 1, "pm_card_visa")},
	} {
		a := s.do(t, "POST", "/checkout", "bob", c.key, c.body)
		if a.code != 409 || problemType(a) != "out-of-stock" || a.body["status"] != "ROLLED_BACK" || a.body["failed_step"] != "reserve" ||
			(i == 1) != (a.header.Get("Idempotent-Replayed") == "true") || stepStatuses(a) != "reserve:FAILED charge:PENDING confirm:PENDING" {
			t.Fatalf("checkout %d: %d %v %s", i, a.code, a.header, a.raw)
		}
	}
	if tot := s.fake.Totals(); len(tot) != 0 {
		t.Fatalf("out of stock reached the provider: %+v", tot)
	}
	if n, r := s.stock(t, "lamp"), s.rows(t, "reservations", "lamp", ""); n != 1 || r != 0 {
		t.Fatalf("stock %d with %d reservations, want 1 and none", n, r)
	}
	if got := s.do(t, "GET", "/checkout/cart-2", "bob", "", ""); got.code != 200 || got.body["status"] != "ROLLED_BACK" || got.body["failed_step"] != "reserve" {
		t.Fatalf("read: %d %s", got.code, got.raw)
	}
}

func TestCheckoutDeclineReleasesTheItems(t *testing.T) {
	t.Parallel()
	s := openShop(t, nil)
	s.setStock(t, "vase", 1)
	body := checkoutOf("vase", 1, stripetest.PaymentMethodInsufficientFunds)
	for i := 0; i < 2; i++ {
		a := s.do(t, "POST", "/checkout", "carol", "cart-4", body)
		if a.code != 402 || problemType(a) != "declined" || a.body["status"] != "ROLLED_BACK" || a.body["failed_step"] != "charge" ||
			(i == 1) != (a.header.Get("Idempotent-Replayed") == "true") || stepStatuses(a) != "reserve:COMPENSATED charge:FAILED confirm:PENDING" {
			t.Fatalf("attempt %d: %d %v %s", i, a.code, a.header, a.raw)
		}
	}
	if n, released := s.stock(t, "vase"), s.rows(t, "reservations", "vase", "RELEASED"); n != 1 || released != 1 {
		t.Fatalf("stock %d with %d released reservations, want 1 and 1", n, released)
	}
	if tot := s.fake.Totals()["eur"]; tot.Succeeded != 0 {
		t.Fatalf("a declined checkout moved money: %+v", tot)
	}
	// The item is back on sale.
	if a := s.do(t, "POST", "/checkout", "carol", "cart-5", checkoutOf("vase", 1, "pm_card_visa")); a.code != 201 {
		t.Fatalf("checkout after the release: %d %s", a.code, a.raw)
	}
	s.booksBalanced(t)
}

// A failure after the charge (Config.ConfirmCheck refuses the order)
// refunds the charge and releases the items.
func TestCheckoutConfirmFailureRefundsAndReleases(t *testing.T) {
	t.Parallel()
	s := openShop(t, func(cfg *service.Config) {
		cfg.ConfirmCheck = func(_ context.Context, o service.Order) error {
			if o.SKU == "fragile" {
				return errors.New("no courier takes it")
			}
			return nil
		}
	})
	s.setStock(t, "fragile", 2)
	body := checkoutOf("fragile", 1, "pm_card_visa")
	for i := 0; i < 2; i++ {
		a := s.do(t, "POST", "/checkout", "dan", "cart-6", body)
		if a.code != 409 || problemType(a) != "order-not-confirmed" || a.body["status"] != "ROLLED_BACK" || a.body["failed_step"] != "confirm" ||
			!strings.Contains(fmt.Sprint(a.body["reason"]), "no courier takes it") || (i == 1) != (a.header.Get("Idempotent-Replayed") == "true") ||
			stepStatuses(a) != "reserve:COMPENSATED charge:COMPENSATED confirm:FAILED" {
			t.Fatalf("attempt %d: %d %v %s", i, a.code, a.header, a.raw)
		}
	}
	if c, r := s.providerCounts(t, "dan", "cart-6"); c != 1 || r != 1 {
		t.Fatalf("%d charges and %d refunds at Stripe, want 1 and 1", c, r)
	}
	if tot := s.fake.Totals()["eur"]; tot.Succeeded != 2000 || tot.Net != 0 {
		t.Fatalf("Stripe totals %+v, want 2000 charged and refunded", tot)
	}
	if n, released, orders := s.stock(t, "fragile"), s.rows(t, "reservations", "fragile", "RELEASED"), s.rows(t, "orders", "fragile", ""); n != 2 || released != 1 || orders != 0 {
		t.Fatalf("stock %d, %d released reservations, %d orders; want 2, 1, 0", n, released, orders)
	}
	s.booksBalanced(t)
}

func TestCheckoutBadInputIsNamedAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := openShop(t, nil)
	s.setStock(t, "pen", 5)
	good := checkoutOf("pen", 1, "pm_card_visa")
	set := func(field, value string) string {
		var m map[string]any
		_ = json.Unmarshal([]byte(good), &m)
		if value == "" {
			delete(m, field)
		} else {
			m[field] = json.RawMessage(value)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name, user, key, body string
		code                  int
		field                 string
	}{
		{"no auth", "", "k-1", good, 401, ""},
		{"no key", "eve", "", good, 400, ""},
		{"key too long for its sub-keys", "eve", strings.Repeat("k", 240), good, 400, ""},
		{"no sku", "eve", "k-1", set("sku", ""), 400, "sku"},
		{"bad sku", "eve", "k-1", set("sku", `"pen drive"`), 400, "sku"},
		{"sku not a string", "eve", "k-1", set("sku", `7`), 400, "sku"},
		{"no qty", "eve", "k-1", set("qty", ""), 400, "qty"},
		{"zero qty", "eve", "k-1", set("qty", `0`), 400, "qty"},
		{"fractional qty", "eve", "k-1", set("qty", `1.5`), 400, "qty"},
		{"qty not a number", "eve", "k-1", set("qty", `"one"`), 400, "qty"},
		{"huge qty", "eve", "k-1", set("qty", `100000`), 400, "qty"},
		{"no amount", "eve", "k-1", set("amount", ""), 400, "amount"},
		{"malformed amount", "eve", "k-1", set("amount", `"20,00"`), 400, "amount"},
		{"too many decimals", "eve", "k-1", set("amount", `"20.001"`), 400, "amount"},
		{"negative amount", "eve", "k-1", set("amount", `"-20.00"`), 400, "amount"},
		{"zero amount", "eve", "k-1", set("amount", `"0.00"`), 400, "amount"},
		{"amount not a number", "eve", "k-1", set("amount", `true`), 400, "amount"},
		{"bad currency", "eve", "k-1", set("currency", `"EURO"`), 400, "currency"},
		{"no currency", "eve", "k-1", set("currency", ""), 400, "currency"},
		{"no payment method", "eve", "k-1", set("payment_method", ""), 400, "payment_method"},
		{"unknown provider", "eve", "k-1", set("provider", `"acme"`), 400, "provider"},
		{"no provider", "eve", "k-1", set("provider", ""), 400, "provider"},
		{"no recipient", "eve", "k-1", set("recipient", ""), 400, "recipient"},
		{"long recipient", "eve", "k-1", set("recipient", `"`+strings.Repeat("r", 256)+`"`), 400, "recipient"},
		{"unknown field", "eve", "k-1", set("coupon", `"FREE"`), 400, "coupon"},
		{"not JSON", "eve", "k-1", `sku=pen`, 400, ""},
	}
	for _, c := range cases {
		a := s.do(t, "POST", "/checkout", c.user, c.key, c.body)
		if a.code != c.code || (c.field != "" && a.body["field"] != c.field) {
			t.Errorf("%s: %d %s, want %d naming %q", c.name, a.code, a.raw, c.code, c.field)
		}
	}
	for _, c := range []struct{ body, field string }{
		{`{"sku": "pen"}`, "stock"},
		{`{"sku": "pen", "stock": -1}`, "stock"},
		{`{"sku": "pen", "stock": "lots"}`, "stock"},
		{`{"stock": 3}`, "sku"},
		{`{"sku": "p n", "stock": 3}`, "sku"},
	} {
		if a := s.do(t, "POST", "/inventory", "ops", "", c.body); a.code != 400 || a.body["field"] != c.field {
			t.Errorf("inventory %s: %d %s, want 400 naming %q", c.body, a.code, a.raw, c.field)
		}
	}
	if tot := s.fake.Totals(); len(tot) != 0 {
		t.Fatalf("bad input reached the provider: %+v", tot)
	}
	if got := s.do(t, "GET", "/checkout/k-1", "eve", "", ""); got.code != 404 {
		t.Fatalf("bad input left a saga: %d %s", got.code, got.raw)
	}
	if n, r := s.stock(t, "pen"), s.rows(t, "reservations", "pen", ""); n != 5 || r != 0 {
		t.Fatalf("bad input changed the stock: %d, %d reservations", n, r)
	}
}

// atOnce sends n requests at once, the i-th by send(i), and returns their
// answers once all are in; it stops the test at a request that got none.
func atOnce(t *testing.T, n int, send func(i int) (answer, error)) []answer {
	t.Helper()
	answers := make([]answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = send(i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("checkout %d: %v", i, err)
		}
	}
	return answers
}

// Many customers check out the last item at once: one gets it, and is
// charged; the others are told it is out of stock and charged nothing.
func TestCheckoutLastItemConcurrently(t *testing.T) {
	t.Parallel()
	s := openShop(t, nil)
	s.setStock(t, "last", 1)
	answers := atOnce(t, 12, func(i int) (answer, error) {
		return s.try("POST", "/checkout", fmt.Sprintf("user-%d", i), "cart-last", checkoutOf("last", 1, "pm_card_visa"))
	})
	completed, charges := 0, 0
	for i, a := range answers {
		switch {
		case a.code == 201 && a.body["status"] == "COMPLETED":
			completed++
		case a.code == 409 && problemType(a) == "out-of-stock":
		default:
			t.Fatalf("checkout %d: %d %s", i, a.code, a.raw)
		}
		c, _ := s.providerCounts(t, fmt.Sprintf("user-%d", i), "cart-last")
		charges += c
	}
	if completed != 1 || charges != 1 {
		t.Fatalf("%d completed, %d charges at Stripe; want 1 and 1", completed, charges)
	}
	if st, o := s.stock(t, "last"), s.rows(t, "orders", "last", ""); st != 0 || o != 1 {
		t.Fatalf("stock %d, %d orders; want 0 and 1", st, o)
	}
	if tot := s.fake.Totals()["eur"]; tot.Succeeded != 2000 {
		t.Fatalf("Stripe totals %+v, want one charge of 20.00", tot)
	}
	s.booksBalanced(t)
}

// Double clicks: many requests with the same key at once charge once; the
// others are told it is in progress, or get the replay.
func TestCheckoutSameKeyConcurrently(t *testing.T) {
	t.Parallel()
	s := openShop(t, nil)
	s.setStock(t, "mug", 10)
	answers := atOnce(t, 12, func(int) (answer, error) {
		return s.try("POST", "/checkout", "frank", "cart-mug", checkoutOf("mug", 3, "pm_card_visa"))
	})
	for i, a := range answers {
		if !(a.code == 201 && a.body["status"] == "COMPLETED") && !(a.code == 409 && problemType(a) == "request-in-progress" && a.header.Get("Retry-After") != "") {
			t.Fatalf("checkout %d: %d %s", i, a.code, a.raw)
		}
	}
	final := retryCheckout(t, s.env, "frank", "cart-mug", checkoutOf("mug", 3, "pm_card_visa"))
	if final.code != 201 {
		t.Fatalf("after the storm: %d %s", final.code, final.raw)
	}
	if c, _ := s.providerCounts(t, "frank", "cart-mug"); c != 1 {
		t.Fatalf("%d charges at Stripe, want 1", c)
	}
	if st, o := s.stock(t, "mug"), s.rows(t, "orders", "mug", ""); st != 7 || o != 1 {
		t.Fatalf("stock %d, %d orders; want 7 and 1", st, o)
	}
	s.booksBalanced(t)
}

// retryCheckout retries as a patient client: until the answer is neither
// 202 nor in progress.
func retryCheckout(t *testing.T, e env, user, key, body string) answer {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		a := e.do(t, "POST", "/checkout", user, key, body)
		if a.code != 202 && problemType(a) != "request-in-progress" || time.Now().After(deadline) {
			return a
		}
	}
}

// The charge's answer is lost: the checkout answers 202, the client gives
// up, and the service's recovery job finishes the saga on its own.
func TestCheckoutPendingIsFinishedByRecovery(t *testing.T) {
	t.Parallel()
	s := openShop(t, func(cfg *service.Config) {
		cfg.RecoverSpec = "@every 1s"
		cfg.LockTimeout = 2 * time.Second
	})
	s.setStock(t, "kite", 1)
	s.fake.Inject(stripetest.Fault{Kind: stripetest.ResetAfter, Method: "POST", Path: "/v1/payment_intents"})
	a := s.do(t, "POST", "/checkout", "gina", "cart-kite", checkoutOf("kite", 1, "pm_card_visa"))
	if a.code != 202 || a.body["pending_step"] != "charge" || a.body["outcome_unknown"] != true || a.header.Get("Retry-After") == "" {
		t.Fatalf("lost charge answer: %d %v %s", a.code, a.header, a.raw)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got := s.do(t, "GET", "/checkout/cart-kite", "gina", "", "")
		if got.body["status"] == "COMPLETED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not completed by recovery: %s", got.raw)
		}
	}
	if again := s.do(t, "POST", "/checkout", "gina", "cart-kite", checkoutOf("kite", 1, "pm_card_visa")); again.code != 201 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the client's retry after recovery: %d %s", again.code, again.raw)
	}
	if c, _ := s.providerCounts(t, "gina", "cart-kite"); c != 1 {
		t.Fatalf("%d charges at Stripe, want 1", c)
	}
	if st := s.stock(t, "kite"); st != 0 {
		t.Fatalf("stock %d, want 0", st)
	}
	s.booksBalanced(t)
}
