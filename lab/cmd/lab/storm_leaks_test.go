package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/lab/internal/keyscan"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/reconcile"
)

// The storm's and the torture's key check finds a client's key wherever
// it leaked (composed, in a sub-key, or as sent), in each place it looks:
// a worker's record, the driver's log, an error answer, the error field
// of a success answer, a reconciler's finding, a text stored for humans;
// and it does not count a success answer naming its own key, nor a
// short hash. Its verdict names each leak without repeating the key.
func TestLeakCheckFindsKeysWhereverTheyLeak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	const charge, checkout = "order-00042", "cart-00007"
	keys := keyscan.NewSet()
	keys.Add(charge, checkout)
	l, err := newLeakCheck(keys)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	composed, _ := payments.ChargeKey("cus_001", charge)

	// A worker's file: a record with the composed key, a clean span, and
	// a line cut short by a kill.
	worker := fmt.Sprintf(`{"time":"t","level":"ERROR","msg":"x","err":"order %s"}
{"span":"payments.charge","attributes":{"payments.key":%q}}
{"time":"t","level":"WARN","msg":"y","err":"cus_002_checkout_`+checkout+`_cha`, composed, idempotency.ShortHash(composed))
	if err := os.WriteFile(filepath.Join(l.dir, "worker-1.jsonl"), []byte(worker), 0o644); err != nil {
		t.Fatal(err)
	}
	// The driver's own log.
	l.logger.Debug("reconcile: looked up", "reference", composed+"_charge_0")
	// Answers.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/problem":
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"detail":"x","steps":[{"output":{"reservation":"%s_reserve"}}]}`, checkout)
		case "/own":
			fmt.Fprintf(w, `{"key":%q,"status":"SUCCEEDED"}`, charge)
		case "/steps":
			fmt.Fprintf(w, `{"key":%q,"steps":[{"name":"charge","error":"charge %s failed"}]}`, checkout, checkout)
		}
	}))
	defer srv.Close()
	hc := &http.Client{Transport: l.transport(http.DefaultTransport)}
	for _, path := range []string{"/problem", "/own", "/steps"} {
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A reconciler's finding, and a text stored for humans.
	l.report("torture-a", &reconcile.Report{Items: []reconcile.Item{{Detail: "void of reference " + composed}, {Detail: "clean"}}}, nil)
	if _, err := pool.Exec(ctx, `INSERT INTO reconcile_runs (instance, error) VALUES ('x', $1)`, "lookup of "+composed+" failed"); err != nil {
		t.Fatal(err)
	}

	figure, problems, err := l.finish(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(figure, "7 (") {
		t.Errorf("figure %q, want 7 texts holding a key", figure)
	}
	wheres := []string{"a log record (worker pid 1)", "a log record (the demo's log)", "an error text (answer 409 to GET /problem)",
		"an error text (answer 200 to GET /steps)", "an error text (torture-a)", "an error text (stored reconcile_runs.error)"}
	all := strings.Join(problems, "\n")
	for _, w := range wheres {
		if !strings.Contains(all, "a full idempotency key in "+w) {
			t.Errorf("no leak named in %s:\n%s", w, all)
		}
	}
	if strings.Contains(all, charge) || strings.Contains(all, checkout) || !strings.Contains(all, "key#"+idempotency.ShortHash(checkout)) {
		t.Errorf("the verdict must name the keys by their hash only:\n%s", all)
	}
	if strings.Contains(all, "span") || strings.Contains(all, "/own") {
		t.Errorf("a clean span or a success answer naming its own key was counted:\n%s", all)
	}
}
