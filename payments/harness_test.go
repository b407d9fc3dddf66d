package payments_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/ledger"
	"github.com/payonce/payonce/money"
)

// Scaffolding shared by the package's tests, whatever the provider: the
// store and ledger of a client, its adapters' HTTP client, the ledger's
// and the receiver's state.

// openStoreLedger opens the idempotency store and the ledger that a test's
// client keeps on pool.
func openStoreLedger(t testing.TB, pool *pgxpool.Pool) (*pgstore.Store, *ledger.Ledger) {
	t.Helper()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return store, l
}

// noKeepAliveClient is the adapters' HTTP client, sending through rt (nil:
// a transport without keep-alives). No keep-alives: a response lost after
// the fake committed must reach the adapter as a lost response, not be
// hidden by a transport resend.
func noKeepAliveClient(rt http.RoundTripper) *http.Client {
	if rt == nil {
		rt = &http.Transport{DisableKeepAlives: true}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: rt}
}

// balanceOf is the EUR balance of account in l; "0.00" while nothing was
// posted to it.
func balanceOf(t testing.TB, l *ledger.Ledger, account string) string {
	t.Helper()
	m, err := l.Balance(context.Background(), account, money.EUR)
	if errors.Is(err, ledger.ErrUnknownAccount) {
		return "0.00"
	}
	if err != nil {
		t.Fatal(err)
	}
	return m.AmountString()
}

// waitDeliveries waits, a minute at most, until fake delivered every
// webhook it emitted.
func waitDeliveries(t testing.TB, fake interface{ WaitDeliveries(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fake.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
}

// outcomeCounts counts the stored webhook events of provider (all
// providers': "") by outcome.
func outcomeCounts(t testing.TB, pool *pgxpool.Pool, provider string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT outcome, count(*) FROM webhook_events
		WHERE $1 = '' OR provider = $1 GROUP BY outcome`, provider)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			t.Fatal(err)
		}
		out[o] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
