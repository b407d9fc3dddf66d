package adyentest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/payonce/payonce/providers/adyen/adyentest"
	"github.com/payonce/payonce/providers/internal/testkit"
)

func TestWebhookDuplicatesAndOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, &adyentest.Config{DuplicateWebhooks: 2})
	gate := make(chan struct{})
	b.sink.mu.Lock()
	b.sink.gate = gate // the first delivery waits: the items after it queue up and go in batches
	b.sink.mu.Unlock()
	for i := range 7 {
		b.post(t, "/payments", fmt.Sprintf("key-%d", i), payment(fmt.Sprintf("ref-%d", i), adyentest.PaymentMethodVisa, 100))
	}
	close(gate)
	b.wait(t)
	items := b.sink.items(t)
	if len(items) != 21 {
		t.Fatalf("%d items delivered, want 7 x 3", len(items))
	}
	// Emission order is kept across batches: the first copy of each item comes in order.
	seen := map[string]bool{}
	next := 0
	for _, it := range items {
		if seen[it.PSPReference] {
			continue
		}
		seen[it.PSPReference] = true
		if it.MerchantReference != fmt.Sprintf("ref-%d", next) {
			t.Fatalf("item %d is %s", next, it.MerchantReference)
		}
		next++
	}
	for _, ev := range b.srv.Events() {
		if ev.Delivered != 3 || ev.Failed != 0 {
			t.Fatalf("event %+v", ev)
		}
	}
	b.sink.mu.Lock()
	deliveries := len(b.sink.bodies)
	b.sink.mu.Unlock()
	if deliveries > 3*3 || deliveries < 3*2 {
		t.Fatalf("%d deliveries for 21 items: batches expected", deliveries)
	}
}

func TestWebhookRetriesAndAbandons(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.sink.fail = 2 // two 500s, then accepted
	b.post(t, "/payments", "key-1", payment("ref-1", adyentest.PaymentMethodVisa, 100))
	b.wait(t)
	if ev := b.srv.Events(); len(ev) != 1 || ev[0].Delivered != 1 || ev[0].Failed != 0 {
		t.Fatalf("events %+v", ev)
	}
	b.sink.mu.Lock()
	n := len(b.sink.bodies)
	b.sink.fail = 100
	b.sink.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	b.post(t, "/payments", "key-2", payment("ref-2", adyentest.PaymentMethodVisa, 100))
	b.wait(t)
	if ev := b.srv.Events(); ev[1].Delivered != 0 || ev[1].Failed != 1 {
		t.Fatalf("abandoned: %+v", ev[1])
	}
}

func TestWebhookWithoutURLAndClose(t *testing.T) {
	t.Parallel()
	srv := adyentest.NewServer(nil)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	b := &bundle{srv: srv, hc: hc}
	b.post(t, "/payments", "k", payment("ref", adyentest.PaymentMethodVisa, 100))
	if err := srv.WaitDeliveries(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ev := srv.Events(); len(ev) != 1 || ev[0].Delivered != 0 || ev[0].Item.AdditionalData["hmacSignature"] == "" {
		t.Fatalf("events %+v", ev)
	}
	srv.Close()

	// A delivery in progress at Close is abandoned and WaitDeliveries says so, whether it was
	// waiting already or is called afterwards.
	block, arrived := make(chan struct{}), make(chan struct{}, 1)
	hs := newBlockingEndpoint(t, block, arrived)
	s2 := adyentest.NewServer(&adyentest.Config{WebhookURL: hs})
	b2 := &bundle{srv: s2, hc: hc}
	b2.post(t, "/payments", "k", payment("ref", adyentest.PaymentMethodVisa, 100))
	select {
	case <-arrived:
	case <-time.After(testkit.Patience):
		t.Fatal("the delivery never arrived")
	}
	errc := make(chan error, 1)
	go func() { errc <- s2.WaitDeliveries(context.Background()) }()
	s2.Close()
	close(block)
	if err := <-errc; !errors.Is(err, adyentest.ErrClosed) {
		t.Fatalf("WaitDeliveries during Close: %v", err)
	}
	if err := s2.WaitDeliveries(context.Background()); !errors.Is(err, adyentest.ErrClosed) {
		t.Fatalf("WaitDeliveries after Close: %v", err)
	}
	if ev := s2.Events(); len(ev) != 1 || ev[0].Delivered != 0 || ev[0].Failed != 1 {
		t.Fatalf("events %+v", ev)
	}
}

// newBlockingEndpoint answers no delivery until block is closed or its client gives up, and
// sends on arrived (when it has room) as each arrives.
func newBlockingEndpoint(t *testing.T, block, arrived chan struct{}) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}
