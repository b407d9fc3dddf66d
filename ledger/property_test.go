package ledger_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"

	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
)

type acct struct {
	code string
	cur  money.Currency
}

var propCurrencies = []money.Currency{money.EUR, money.JPY, money.KWD}

// genEntry draws a balanced entry over the given codes: one or two
// currencies, two to four postings each, non-zero amounts.
func genEntry(t *rapid.T, key string, codes []string) ledger.PostParams {
	p := ledger.PostParams{Key: key, Step: rapid.SampledFrom([]string{"charge", "refund", "fee"}).Draw(t, "step")}
	curs := rapid.SliceOfNDistinct(rapid.SampledFrom(propCurrencies), 1, 2, rapid.ID).Draw(t, "currencies")
	for _, cur := range curs {
		n := rapid.IntRange(2, 4).Draw(t, "postings")
		var sum int64
		for i := 0; i < n-1; i++ {
			minor := rapid.Int64Range(-1_000_000, 1_000_000).Filter(func(v int64) bool { return v != 0 }).Draw(t, "minor")
			sum += minor
			m, _ := money.FromMinor(minor, cur)
			p.Postings = append(p.Postings, ledger.Posting{Account: rapid.SampledFrom(codes).Draw(t, "account"), Amount: m})
		}
		if sum == 0 { // the last posting would be zero: move one unit, keeping the first non-zero
			first := &p.Postings[len(p.Postings)-(n-1)]
			delta := int64(1)
			if first.Amount.Minor() == -1 {
				delta = -1
			}
			first.Amount, _ = money.FromMinor(first.Amount.Minor()+delta, cur)
			sum = delta
		}
		m, _ := money.FromMinor(-sum, cur)
		p.Postings = append(p.Postings, ledger.Posting{Account: rapid.SampledFrom(codes).Draw(t, "account"), Amount: m})
	}
	return p
}

func shuffled(t *rapid.T, ps []ledger.Posting) []ledger.Posting {
	return rapid.Permutation(ps).Draw(t, "order")
}

// Any sequence of valid entries, replays, conflicting and invalid posts and
// balance reads keeps every account's balance equal to the sum of its
// postings (now and as of each entry), and the books balanced per currency.
func TestPropertyBalances(t *testing.T) {
	t.Parallel()
	b := setup(t, &ledger.Config{SnapshotEvery: 2})
	var run atomic.Int64
	rapid.Check(t, func(t *rapid.T) {
		prefix := fmt.Sprintf("r%d", run.Add(1))
		codes := []string{prefix + ":a", prefix + ":b", prefix + ":c"}
		var accounts []acct
		for _, code := range codes {
			for _, cur := range propCurrencies {
				if _, err := b.ledger.EnsureAccount(b.ctx, ledger.EnsureAccountParams{Code: code, Currency: cur}); err != nil {
					t.Fatalf("EnsureAccount: %v", err)
				}
				accounts = append(accounts, acct{code, cur})
			}
		}
		model := map[acct]decimal.Decimal{}
		type posted struct {
			params ledger.PostParams
			entry  ledger.Entry
			after  map[acct]decimal.Decimal // model right after the entry
		}
		var history []posted

		steps := rapid.IntRange(1, 10).Draw(t, "steps")
		for i := range steps {
			switch action := rapid.IntRange(0, 9).Draw(t, "action"); {
			case action <= 4 || len(history) == 0: // a new valid entry
				p := genEntry(t, fmt.Sprintf("%s-%d", prefix, i), codes)
				res, err := b.ledger.Post(b.ctx, p)
				if err != nil || res.Replayed {
					t.Fatalf("Post(%+v) = %+v, %v", p, res, err)
				}
				for _, ps := range p.Postings {
					a := acct{ps.Account, ps.Amount.Currency()}
					model[a] = model[a].Add(ps.Amount.Amount())
				}
				after := map[acct]decimal.Decimal{}
				for k, v := range model {
					after[k] = v
				}
				history = append(history, posted{p, res.Entry, after})
			case action == 5: // a replay, postings in another order
				h := rapid.SampledFrom(history).Draw(t, "replay")
				p := h.params
				p.Postings = shuffled(t, p.Postings)
				res, err := b.ledger.Post(b.ctx, p)
				if err != nil || !res.Replayed || res.Entry.ID != h.entry.ID {
					t.Fatalf("replay = %+v, %v; want entry %d replayed", res, err, h.entry.ID)
				}
			case action == 6: // same key and step, other postings
				h := rapid.SampledFrom(history).Draw(t, "conflict")
				p := h.params
				p.Postings = append([]ledger.Posting(nil), p.Postings...)
				last := len(p.Postings) - 1
				delta := int64(1)
				if p.Postings[0].Amount.Minor() == -1 { // keep it non-zero
					delta = 2
				}
				d, _ := money.FromMinor(delta, p.Postings[0].Amount.Currency())
				p.Postings[0].Amount, _ = p.Postings[0].Amount.Add(d)
				p.Postings = append(p.Postings, ledger.Posting{Account: p.Postings[last].Account, Amount: d.Neg()})
				if _, err := b.ledger.Post(b.ctx, p); !errors.Is(err, ledger.ErrKeyConflict) {
					t.Fatalf("conflicting post error = %v; want ErrKeyConflict", err)
				}
			case action == 7: // invalid: unbalanced, unknown account, one posting
				p := genEntry(t, fmt.Sprintf("%s-%d", prefix, i), codes)
				var want error
				switch rapid.IntRange(0, 2).Draw(t, "invalid") {
				case 0:
					p.Postings[0].Amount, _ = money.FromMinor(p.Postings[0].Amount.Minor()+7, p.Postings[0].Amount.Currency())
					want = ledger.ErrUnbalanced
					if p.Postings[0].Amount.IsZero() {
						want = ledger.ErrInvalidParams
					}
				case 1:
					p.Postings[len(p.Postings)-1].Account = prefix + ":missing"
					want = ledger.ErrUnknownAccount
				case 2:
					p.Postings = p.Postings[:1]
					want = ledger.ErrTooFewPostings
				}
				if _, err := b.ledger.Post(b.ctx, p); !errors.Is(err, want) {
					t.Fatalf("invalid post error = %v; want %v", err, want)
				}
			default: // a read, which may record a snapshot
				a := rapid.SampledFrom(accounts).Draw(t, "read")
				got, err := b.ledger.Balance(b.ctx, a.code, a.cur)
				if err != nil || !got.Amount().Equal(model[a]) {
					t.Fatalf("Balance(%v) = %v, %v; want %s", a, got, err, model[a])
				}
			}
		}

		totals := map[money.Currency]decimal.Decimal{}
		for _, a := range accounts {
			got, err := b.ledger.Balance(b.ctx, a.code, a.cur)
			if err != nil || !got.Amount().Equal(model[a]) {
				t.Fatalf("Balance(%v) = %v, %v; want %s", a, got, err, model[a])
			}
			var sum string
			err = b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(p.amount), 0)::text FROM ledger_postings p
				JOIN ledger_accounts x ON x.id = p.account_id WHERE x.code = $1 AND x.currency = $2`, a.code, string(a.cur)).Scan(&sum)
			if err != nil || !decimal.RequireFromString(sum).Equal(model[a]) {
				t.Fatalf("sum of postings of %v = %s, %v; want %s", a, sum, err, model[a])
			}
			totals[a.cur] = totals[a.cur].Add(got.Amount())
		}
		for cur, total := range totals {
			if !total.IsZero() {
				t.Fatalf("books unbalanced in %s: %s", cur, total)
			}
		}
		for _, h := range history {
			for _, ps := range h.params.Postings {
				a := acct{ps.Account, ps.Amount.Currency()}
				got, err := b.ledger.BalanceAt(b.ctx, a.code, a.cur, h.entry.PostedAt)
				if err != nil || !got.Amount().Equal(h.after[a]) {
					t.Fatalf("BalanceAt(%v, entry %d) = %v, %v; want %s", a, h.entry.ID, got, err, h.after[a])
				}
			}
		}
	})
}

// However many goroutines post one entry, in whatever posting order, one
// entry is written and every goroutine gets it.
func TestPropertyConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var run atomic.Int64
	codes := []string{stripe, ledger.CustomerPayments, ledger.CustomerRefunds}
	rapid.Check(t, func(t *rapid.T) {
		key := fmt.Sprintf("same-%d", run.Add(1))
		p := genEntry(t, key, codes)
		// The setup chart has EUR and JPY: move KWD postings to EUR. Both
		// currencies summed to zero in minor units, so the entry stays
		// balanced.
		for i := range p.Postings {
			if p.Postings[i].Amount.Currency() == money.KWD {
				p.Postings[i].Amount, _ = money.FromMinor(p.Postings[i].Amount.Minor(), money.EUR)
			}
		}
		n := rapid.IntRange(2, 12).Draw(t, "goroutines")
		orders := make([][]ledger.Posting, n)
		for i := range orders {
			orders[i] = shuffled(t, p.Postings)
		}
		results := make([]ledger.PostResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				q := p
				q.Postings = orders[i]
				<-start
				results[i], errs[i] = b.ledger.Post(b.ctx, q)
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
				t.Fatalf("goroutines got entries %d and %d", results[0].Entry.ID, results[i].Entry.ID)
			}
			if !results[i].Replayed {
				fresh++
			}
		}
		var entries int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ledger_entries WHERE key = $1`, key).Scan(&entries); err != nil {
			t.Fatal(err)
		}
		if fresh != 1 || entries != 1 {
			t.Fatalf("%d fresh posts and %d entries for one key; want 1 and 1", fresh, entries)
		}
	})
}
