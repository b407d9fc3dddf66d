package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/pgtest"
)

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	ledger *ledger.Ledger
}

// setup gives the test its own migrated schema and a Ledger on it, with the
// payments chart for stripe in EUR and JPY.
func setup(t *testing.T, cfg *ledger.Config) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pool := pgtest.Pool(t)
	l, err := ledger.New(pool, cfg)
	if err != nil {
		t.Fatalf("ledger.New: %v", err)
	}
	for _, cur := range []money.Currency{money.EUR, money.JPY} {
		for _, a := range ledger.ChartAccounts("stripe", cur) {
			if _, err := l.EnsureAccount(ctx, a); err != nil {
				t.Fatalf("EnsureAccount %v: %v", a, err)
			}
		}
	}
	return &bundle{ctx: ctx, pool: pool, ledger: l}
}

func (b *bundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func (b *bundle) balance(t *testing.T, code string, cur money.Currency) string {
	t.Helper()
	m, err := b.ledger.Balance(b.ctx, code, cur)
	if err != nil {
		t.Fatalf("Balance(%s, %s): %v", code, cur, err)
	}
	return m.String()
}

func eur(s string) money.Money { return money.MustParse(s, money.EUR) }

var stripe = ledger.ProviderCash("stripe")

func charge(t *testing.T, key string, amount money.Money) ledger.PostParams {
	t.Helper()
	p, err := ledger.ChargeEntry(key, "stripe", amount)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	if _, err := ledger.New(nil, nil); !errors.Is(err, ledger.ErrInvalidParams) {
		t.Fatalf("New(nil pool) error = %v", err)
	}
	pool, _ := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never connects
	defer pool.Close()
	_, err := ledger.New(pool, &ledger.Config{SnapshotEvery: -1})
	if !errors.Is(err, ledger.ErrInvalidParams) || !strings.Contains(err.Error(), "Config.SnapshotEvery") {
		t.Fatalf("New(SnapshotEvery: -1) error = %v; want one naming Config.SnapshotEvery", err)
	}
	if _, err := ledger.New(pool, nil); err != nil {
		t.Fatalf("New(pool, nil): %v", err)
	}
}

func TestEnsureAccount(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.ledger.EnsureAccount(b.ctx, ledger.EnsureAccountParams{Code: "provider:adyen", Currency: "kwd"})
	if err != nil || !res.Created || res.Account.Currency != money.KWD {
		t.Fatalf("first EnsureAccount = %+v, %v", res, err)
	}
	again, err := b.ledger.EnsureAccount(b.ctx, ledger.EnsureAccountParams{Code: "provider:adyen", Currency: money.KWD})
	if err != nil || again.Created || !again.Account.CreatedAt.Equal(res.Account.CreatedAt) {
		t.Fatalf("second EnsureAccount = %+v, %v; want the existing account", again, err)
	}
	for _, p := range []ledger.EnsureAccountParams{
		{Code: "", Currency: money.EUR},
		{Code: "has space", Currency: money.EUR},
		{Code: ":leading", Currency: money.EUR},
		{Code: strings.Repeat("a", 201), Currency: money.EUR},
		{Code: "ok", Currency: "XYZ"},
		{Code: "ok", Currency: ""},
	} {
		_, err := b.ledger.EnsureAccount(b.ctx, p)
		if !errors.Is(err, ledger.ErrInvalidParams) {
			t.Errorf("EnsureAccount(%+v) error = %v; want ErrInvalidParams", p, err)
		}
	}

	// Concurrent ensures of one new account: one creates, all succeed.
	var wg sync.WaitGroup
	created := make(chan bool, 16)
	for range 16 {
		wg.Go(func() {
			res, err := b.ledger.EnsureAccount(b.ctx, ledger.EnsureAccountParams{Code: "provider:paypal", Currency: money.USD})
			if err != nil {
				t.Errorf("concurrent EnsureAccount: %v", err)
			}
			created <- res.Created
		})
	}
	wg.Wait()
	close(created)
	n := 0
	for c := range created {
		if c {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent EnsureAccount calls reported Created; want 1", n)
	}
}

func TestChargeAndRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.ledger.Post(b.ctx, charge(t, "usr_1_checkout_a", eur("25.00")))
	if err != nil || res.Replayed || res.Entry.ID == 0 || res.Entry.PostedAt.IsZero() {
		t.Fatalf("Post charge = %+v, %v", res, err)
	}
	refund, err := ledger.RefundEntry("usr_1_refund_b", "stripe", eur("5.50"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.Post(b.ctx, refund); err != nil {
		t.Fatalf("Post refund: %v", err)
	}
	for code, want := range map[string]string{stripe: "19.50 EUR", ledger.CustomerPayments: "-25.00 EUR", ledger.CustomerRefunds: "5.50 EUR"} {
		if got := b.balance(t, code, money.EUR); got != want {
			t.Errorf("balance %s = %s; want %s", code, got, want)
		}
	}
	if got := b.balance(t, stripe, money.JPY); got != "0 JPY" {
		t.Errorf("JPY balance = %s; want 0 JPY", got)
	}

	if _, err := ledger.ChargeEntry("k", "stripe", eur("0")); !errors.Is(err, money.ErrNotPositive) {
		t.Errorf("ChargeEntry(0) error = %v; want money.ErrNotPositive", err)
	}
	if _, err := ledger.RefundEntry("k", "stripe", eur("-1")); !errors.Is(err, money.ErrNotPositive) {
		t.Errorf("RefundEntry(-1) error = %v; want money.ErrNotPositive", err)
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first, err := b.ledger.Post(b.ctx, charge(t, "k1", eur("10.50")))
	if err != nil {
		t.Fatal(err)
	}
	// Same postings in another order, amounts written with another scale,
	// another description: a replay returning the original entry.
	p := ledger.PostParams{Key: "k1", Step: ledger.StepCharge, Description: "retry", Postings: []ledger.Posting{
		ledger.Credit(ledger.CustomerPayments, money.MustParse("10.5", money.EUR)),
		ledger.Debit(stripe, money.MustParse("10.500", money.EUR)),
	}}
	again, err := b.ledger.Post(b.ctx, p)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if !again.Replayed || again.Entry.ID != first.Entry.ID || !again.Entry.PostedAt.Equal(first.Entry.PostedAt) ||
		again.Entry.Description != first.Entry.Description || again.Entry.Postings[0].Account != stripe {
		t.Fatalf("replay = %+v; want the original entry %+v", again, first)
	}
	if n := b.count(t, "ledger_entries"); n != 1 {
		t.Fatalf("%d entries after a replay; want 1", n)
	}
	if got := b.balance(t, stripe, money.EUR); got != "10.50 EUR" {
		t.Fatalf("balance after replay = %s", got)
	}
}

func TestKeyConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first, err := b.ledger.Post(b.ctx, charge(t, "k1", eur("10.50")))
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]ledger.PostParams{
		"other amount":   charge(t, "k1", eur("10.51")),
		"other account":  {Key: "k1", Step: ledger.StepCharge, Postings: []ledger.Posting{ledger.Debit(ledger.CustomerRefunds, eur("10.50")), ledger.Credit(ledger.CustomerPayments, eur("10.50"))}},
		"extra postings": {Key: "k1", Step: ledger.StepCharge, Postings: []ledger.Posting{ledger.Debit(stripe, eur("10.50")), ledger.Credit(ledger.CustomerPayments, eur("10.50")), ledger.Debit(stripe, eur("1")), ledger.Credit(ledger.CustomerPayments, eur("1"))}},
		"split amounts":  {Key: "k1", Step: ledger.StepCharge, Postings: []ledger.Posting{ledger.Debit(stripe, eur("5.25")), ledger.Debit(stripe, eur("5.25")), ledger.Credit(ledger.CustomerPayments, eur("10.50"))}},
	} {
		_, err := b.ledger.Post(b.ctx, p)
		var kc *ledger.KeyConflictError
		if !errors.Is(err, ledger.ErrKeyConflict) || !errors.As(err, &kc) || kc.EntryID != first.Entry.ID {
			t.Errorf("%s: error = %v; want *KeyConflictError for entry %d", name, err, first.Entry.ID)
		}
	}
	// Same key, another step: another entry.
	refund, _ := ledger.RefundEntry("k1", "stripe", eur("10.50"))
	if res, err := b.ledger.Post(b.ctx, refund); err != nil || res.Replayed {
		t.Fatalf("same key, step refund = %+v, %v; want a new entry", res, err)
	}
	if n := b.count(t, "ledger_postings"); n != 4 {
		t.Fatalf("%d postings; want 4", n)
	}
}

func TestRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	good := []ledger.Posting{ledger.Debit(stripe, eur("1")), ledger.Credit(ledger.CustomerPayments, eur("1"))}
	for _, tc := range []struct {
		name string
		p    ledger.PostParams
		want error
		msg  string
	}{
		{"unbalanced", ledger.PostParams{Key: "k", Step: "s", Postings: []ledger.Posting{ledger.Debit(stripe, eur("10")), ledger.Credit(ledger.CustomerPayments, eur("9.99"))}}, ledger.ErrUnbalanced, "EUR postings sum to 0.01"},
		{"balanced in total but not per currency", ledger.PostParams{Key: "k", Step: "s", Postings: []ledger.Posting{ledger.Debit(stripe, money.MustParse("100", money.JPY)), ledger.Credit(ledger.CustomerPayments, eur("100"))}}, ledger.ErrUnbalanced, "EUR postings sum to -100"},
		{"unknown account", ledger.PostParams{Key: "k", Step: "s", Postings: []ledger.Posting{ledger.Debit("provider:nope", eur("1")), ledger.Credit(ledger.CustomerPayments, eur("1"))}}, ledger.ErrUnknownAccount, `unknown account "provider:nope" in EUR (posting 0)`},
		{"wrong currency for the account", ledger.PostParams{Key: "k", Step: "s", Postings: []ledger.Posting{ledger.Debit(stripe, money.MustParse("1", money.USD)), ledger.Credit(ledger.CustomerPayments, money.MustParse("1", money.USD))}}, ledger.ErrWrongCurrency, `account "provider:stripe" is not held in USD, only in EUR, JPY (posting 0)`},
		{"zero postings", ledger.PostParams{Key: "k", Step: "s"}, ledger.ErrTooFewPostings, "has 0 posting(s)"},
		{"one posting", ledger.PostParams{Key: "k", Step: "s", Postings: good[:1]}, ledger.ErrTooFewPostings, "has 1 posting(s)"},
		{"zero amount", ledger.PostParams{Key: "k", Step: "s", Postings: append([]ledger.Posting{ledger.Debit(stripe, eur("0"))}, good...)}, ledger.ErrInvalidParams, "PostParams.Postings[0].Amount is zero"},
		{"zero Money", ledger.PostParams{Key: "k", Step: "s", Postings: []ledger.Posting{{Account: stripe}, good[1]}}, money.ErrUnknownCurrency, "PostParams.Postings[0].Amount has no valid currency"},
		{"bad code", ledger.PostParams{Key: "k", Step: "s", Postings: []ledger.Posting{ledger.Debit("a b", eur("1")), good[1]}}, ledger.ErrInvalidParams, "PostParams.Postings[0].Account"},
		{"empty key", ledger.PostParams{Step: "s", Postings: good}, ledger.ErrInvalidParams, "PostParams.Key is empty"},
		{"empty step", ledger.PostParams{Key: "k", Postings: good}, ledger.ErrInvalidParams, "PostParams.Step is empty"},
		{"long key", ledger.PostParams{Key: strings.Repeat("k", 256), Step: "s", Postings: good}, ledger.ErrInvalidParams, "PostParams.Key is 256 bytes"},
		{"NUL in description", ledger.PostParams{Key: "k", Step: "s", Description: "a\x00b", Postings: good}, ledger.ErrInvalidParams, "NUL"},
	} {
		_, err := b.ledger.Post(b.ctx, tc.p)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error = %v; want %v containing %q", tc.name, err, tc.want, tc.msg)
		}
	}
	if n := b.count(t, "ledger_entries") + b.count(t, "ledger_postings"); n != 0 {
		t.Fatalf("refused posts left %d rows behind", n)
	}
}

func TestPostTx(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	// Rolled back with the caller's transaction.
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := b.ledger.PostTx(b.ctx, tx, charge(t, "k1", eur("3"))); err != nil {
			t.Fatalf("PostTx: %v", err)
		}
		return errors.New("caller fails")
	})
	if err == nil || b.count(t, "ledger_entries") != 0 {
		t.Fatalf("rolled-back PostTx left an entry (err %v)", err)
	}

	// A refused PostTx leaves the caller's transaction usable, and what it
	// did commit together.
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := b.ledger.EnsureAccountTx(b.ctx, tx, ledger.EnsureAccountParams{Code: "provider:adyen", Currency: money.EUR}); err != nil {
			return err
		}
		bad := ledger.PostParams{Key: "k0", Step: "s", Postings: []ledger.Posting{ledger.Debit("provider:nope", eur("1")), ledger.Credit(ledger.CustomerPayments, eur("1"))}}
		if _, err := b.ledger.PostTx(b.ctx, tx, bad); !errors.Is(err, ledger.ErrUnknownAccount) {
			t.Errorf("PostTx to unknown account: %v", err)
		}
		p, _ := ledger.ChargeEntry("k2", "adyen", eur("4"))
		if _, err := b.ledger.PostTx(b.ctx, tx, p); err != nil {
			return err
		}
		// Replayed within the same transaction.
		res, err := b.ledger.PostTx(b.ctx, tx, p)
		if err != nil || !res.Replayed {
			t.Errorf("replay in the same tx = %+v, %v", res, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	if got := b.balance(t, "provider:adyen", money.EUR); got != "4.00 EUR" {
		t.Fatalf("balance after PostTx commit = %s", got)
	}
	if _, err := b.ledger.PostTx(b.ctx, nil, charge(t, "k3", eur("1"))); !errors.Is(err, ledger.ErrInvalidParams) {
		t.Fatalf("PostTx(nil tx) error = %v", err)
	}
}

// Many goroutines posting one key yield one entry, and all of them get it.
func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const n = 24
	results := make([]ledger.PostResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = b.ledger.Post(b.ctx, charge(t, "same-key", eur("7.77")))
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if results[i].Entry.ID != results[0].Entry.ID {
			t.Fatalf("goroutine %d got entry %d, goroutine 0 entry %d", i, results[i].Entry.ID, results[0].Entry.ID)
		}
		if !results[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 || b.count(t, "ledger_entries") != 1 || b.count(t, "ledger_postings") != 2 {
		t.Fatalf("%d fresh posts, %d entries, %d postings; want 1, 1, 2", fresh, b.count(t, "ledger_entries"), b.count(t, "ledger_postings"))
	}
	if got := b.balance(t, stripe, money.EUR); got != "7.77 EUR" {
		t.Fatalf("balance = %s", got)
	}
}

func TestBalanceAtAndEntries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var posted []ledger.Entry
	for i, amount := range []string{"1.00", "2.00", "4.00", "8.00", "16.00"} {
		res, err := b.ledger.Post(b.ctx, charge(t, fmt.Sprintf("k%d", i), eur(amount)))
		if err != nil {
			t.Fatal(err)
		}
		posted = append(posted, res.Entry)
	}
	start := posted[0].PostedAt.Add(-time.Microsecond)
	if got, err := b.ledger.BalanceAt(b.ctx, stripe, money.EUR, start); err != nil || got.String() != "0.00 EUR" {
		t.Errorf("BalanceAt(before the first entry) = %v, %v", got, err)
	}
	sum := 0
	for i, e := range posted {
		sum += 1 << i
		got, err := b.ledger.BalanceAt(b.ctx, stripe, money.EUR, e.PostedAt)
		if want := fmt.Sprintf("%d.00 EUR", sum); err != nil || got.String() != want {
			t.Errorf("BalanceAt(entry %d) = %v, %v; want %s", i, got, err, want)
		}
	}
	if got, err := b.ledger.BalanceAt(b.ctx, stripe, money.EUR, time.Now().Add(time.Hour)); err != nil || got.String() != "31.00 EUR" {
		t.Errorf("BalanceAt(future) = %v, %v", got, err)
	}

	// Entries in order, in pages.
	var got []ledger.Entry
	var after ledger.EntryCursor
	for {
		page, err := b.ledger.Entries(b.ctx, ledger.EntriesParams{Code: ledger.CustomerPayments, Currency: money.EUR, After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1].Cursor()
	}
	if len(got) != len(posted) {
		t.Fatalf("Entries returned %d entries; want %d", len(got), len(posted))
	}
	for i := range got {
		if got[i].ID != posted[i].ID || len(got[i].Postings) != 2 || !got[i].Postings[1].Amount.Equal(posted[i].Postings[1].Amount) {
			t.Fatalf("entry %d = %+v; want %+v", i, got[i], posted[i])
		}
	}

	for _, read := range []func() error{
		func() error { _, err := b.ledger.Balance(b.ctx, "nope", money.EUR); return err },
		func() error { _, err := b.ledger.BalanceAt(b.ctx, stripe, money.USD, time.Now()); return err },
		func() error {
			_, err := b.ledger.Entries(b.ctx, ledger.EntriesParams{Code: "nope", Currency: money.EUR})
			return err
		},
	} {
		if err := read(); !errors.Is(err, ledger.ErrUnknownAccount) {
			t.Errorf("read of an unknown account: %v", err)
		}
	}
	if _, err := b.ledger.Entries(b.ctx, ledger.EntriesParams{Code: stripe, Currency: money.EUR, Limit: 5000}); !errors.Is(err, ledger.ErrInvalidParams) {
		t.Errorf("Entries(Limit 5000) error = %v", err)
	}
}

func TestReversal(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.ledger.Post(b.ctx, charge(t, "k1", eur("12.34")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.Post(b.ctx, ledger.Reversal(res.Entry, "k1", "charge-reversal")); err != nil {
		t.Fatalf("post reversal: %v", err)
	}
	if got := b.balance(t, stripe, money.EUR); got != "0.00 EUR" {
		t.Fatalf("balance after reversal = %s", got)
	}
}

// Balance reads record snapshots; balances stay exact while entries are
// posted concurrently with the reads.
func TestSnapshotsUnderConcurrentPosting(t *testing.T) {
	t.Parallel()
	b := setup(t, &ledger.Config{SnapshotEvery: 3})
	const writers, perWriter = 4, 30
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if _, err := b.ledger.Post(b.ctx, charge(t, fmt.Sprintf("w%d-%d", w, i), eur("0.01"))); err != nil {
					t.Errorf("post: %v", err)
					return
				}
			}
		})
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := b.ledger.Balance(b.ctx, stripe, money.EUR); err != nil {
				t.Errorf("balance: %v", err)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()
	// Force at least one snapshot after the writers, then read again.
	if _, err := b.ledger.Balance(b.ctx, stripe, money.EUR); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d.%02d EUR", writers*perWriter/100, writers*perWriter%100)
	if got := b.balance(t, stripe, money.EUR); got != want {
		t.Fatalf("balance = %s; want %s", got, want)
	}
	if n := b.count(t, "ledger_balance_snapshots"); n == 0 {
		t.Fatal("no snapshot was recorded")
	}
	var bad int
	err := b.pool.QueryRow(b.ctx, `
		SELECT count(*) FROM ledger_balance_snapshots s
		WHERE s.balance <> (SELECT coalesce(sum(amount), 0) FROM ledger_postings p WHERE p.account_id = s.account_id AND p.xid < s.upto_xid)
		   OR s.postings <> (SELECT count(*) FROM ledger_postings p WHERE p.account_id = s.account_id AND p.xid < s.upto_xid)`).Scan(&bad)
	if err != nil || bad != 0 {
		t.Fatalf("%d snapshots disagree with their postings (err %v)", bad, err)
	}
}
