// Package providertest is the conformance suite every provider.Provider
// adapter passes against its provider's stateful fake:
//
//	func TestConformance(t *testing.T) {
//		providertest.Exercise(t, func(t *testing.T) providertest.Harness { ... })
//	}
//
// It asserts what payments relies on: a success, a replay that is the same
// provider object, a decline that is final for its key, a lost response
// whose retry resolves to the same object (exactly one at the provider), an
// in-flight duplicate refused as in progress, a lookup that finds what was
// created and reports absence, and webhook verification. It imports only
// package payments/provider, as adapters do.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// Harness is one adapter over a fresh fake.
type Harness struct {
	Provider provider.Provider
	// Succeeds and Declines are payment methods the fake accepts and
	// declines.
	Succeeds, Declines string
	// Charges counts the charges that really exist at the fake for a
	// local key (whatever the adapter answered).
	Charges func(key string) int
	// LoseNextResponse makes the fake commit the next write and lose its
	// response (a reset after the provider committed).
	LoseNextResponse func()
	// HoldNext makes the fake hold the next write before it executes, its key claimed, until
	// release is called; held returns once the fake holds it (a Latency fault with a long
	// Delay, the fake's Server.WaitHeld and Server.EndLatency). held returns the context's
	// error if it ends first.
	HoldNext func() (held func(ctx context.Context) error, release func())
	// NoReplaySignal is set for providers that answer a replay exactly like
	// the first request (Adyen): the replay check then asserts the same
	// object and a single charge, not ChargeResult.Replayed.
	NoReplaySignal bool
	// Webhook returns a verification of a correctly signed event and of a
	// wrongly signed one; the first must succeed, the second fail.
	Webhook func(t *testing.T) (good, bad error)
}

// Exercise runs every check, each on a fresh harness.
func Exercise(t *testing.T, newHarness func(t *testing.T) Harness) {
	checks := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Success", testSuccess},
		{"ReplayIsTheSameObject", testReplay},
		{"DeclineIsFinal", testDecline},
		{"LostResponseRetryResolves", testLostResponse},
		{"InFlightDuplicate", testInFlight},
		{"Lookup", testLookup},
		{"WebhookVerification", testWebhook},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newHarness(t))
		})
	}
}

var seq struct {
	sync.Mutex
	n int
}

// req builds a charge of 49.99 EUR for a fresh local key.
func req(t *testing.T, h Harness, method string) provider.ChargeRequest {
	t.Helper()
	seq.Lock()
	seq.n++
	n := seq.n
	seq.Unlock()
	key := fmt.Sprintf("usr_conf_charge_%d_%d", time.Now().UnixNano(), n)
	amount, err := money.Parse("49.99", money.EUR)
	if err != nil {
		t.Fatal(err)
	}
	return provider.ChargeRequest{Key: key, ProviderKey: provider.DeriveKey(key, "charge", 0, provider.MaxReferenceLen(h.Provider)),
		Amount: amount, Recipient: "acct_conf", PaymentMethod: method, Description: "conformance",
		Shopper: "usr_conf"} // as payments fills it (the Scope by default): Adyen requires one with a stored card
}

// ctxT bounds a call or a wait for an event: generously, since a loaded machine stretches every
// step.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testSuccess(t *testing.T, h Harness) {
	r := req(t, h, h.Succeeds)
	res, err := h.Provider.Charge(ctxT(t), r)
	if err != nil || res.Status != provider.ChargeSucceeded || res.ProviderID == "" || res.Replayed {
		t.Fatalf("charge: %+v %v", res, err)
	}
	if !res.Amount.Equal(r.Amount) {
		t.Fatalf("amount %v, want %v", res.Amount, r.Amount)
	}
	if n := h.Charges(r.Key); n != 1 {
		t.Fatalf("charges at the provider = %d, want 1", n)
	}
}

func testReplay(t *testing.T, h Harness) {
	r := req(t, h, h.Succeeds)
	first, err := h.Provider.Charge(ctxT(t), r)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.Provider.Charge(ctxT(t), r)
	if err != nil || again.ProviderID != first.ProviderID || (!again.Replayed && !h.NoReplaySignal) {
		t.Fatalf("retry with the same provider key: %+v %v, want a replay of %s", again, err, first.ProviderID)
	}
	if n := h.Charges(r.Key); n != 1 {
		t.Fatalf("charges at the provider = %d, want 1", n)
	}
}

func testDecline(t *testing.T, h Harness) {
	r := req(t, h, h.Declines)
	for i := 0; i < 2; i++ {
		_, err := h.Provider.Charge(ctxT(t), r)
		var d *provider.DeclineError
		if !errors.As(err, &d) || d.DeclineCode == "" || idempotency.SafeToRetry(err) {
			t.Fatalf("attempt %d: err = %v, want a final DeclineError with its code", i, err)
		}
	}
}

func testLostResponse(t *testing.T, h Harness) {
	r := req(t, h, h.Succeeds)
	h.LoseNextResponse()
	_, err := h.Provider.Charge(ctxT(t), r)
	if !errors.Is(err, provider.ErrOutcomeUnknown) || !idempotency.SafeToRetry(err) {
		t.Fatalf("lost response: err = %v, want an unknown outcome, safe to retry", err)
	}
	if n := h.Charges(r.Key); n != 1 {
		t.Fatalf("the provider committed %d charges, want 1 (the response was lost after the commit)", n)
	}
	res, err := h.Provider.Charge(ctxT(t), r)
	if err != nil || res.Status != provider.ChargeSucceeded {
		t.Fatalf("retry after a lost response: %+v %v", res, err)
	}
	if n := h.Charges(r.Key); n != 1 {
		t.Fatalf("after the retry: %d charges, want exactly 1", n)
	}
}

func testInFlight(t *testing.T, h Harness) {
	r := req(t, h, h.Succeeds)
	held, release := h.HoldNext()
	done := make(chan error, 1)
	ctx := ctxT(t)
	go func() {
		_, err := h.Provider.Charge(ctx, r)
		done <- err
	}()
	if err := held(ctxT(t)); err != nil {
		t.Fatalf("the first charge was never held: %v", err)
	}
	_, err := h.Provider.Charge(ctxT(t), r)
	if !errors.Is(err, provider.ErrInProgress) || !idempotency.SafeToRetry(err) {
		t.Fatalf("duplicate while the first is in flight: err = %v, want in progress", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("first: %v", err)
	}
	if n := h.Charges(r.Key); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func testLookup(t *testing.T, h Harness) {
	r := req(t, h, h.Succeeds)
	from := time.Now().Add(-time.Hour)
	res, err := h.Provider.Charge(ctxT(t), r)
	if err != nil {
		t.Fatal(err)
	}
	found, err := h.Provider.Lookup(ctxT(t), provider.LookupRequest{Key: r.Key, ProviderKey: r.ProviderKey, ProviderID: res.ProviderID, From: from, To: time.Now().Add(time.Hour)})
	if err != nil || len(found.Charges) != 1 || found.Charges[0].ProviderID != res.ProviderID {
		t.Fatalf("lookup of %s: %+v %v", res.ProviderID, found, err)
	}
	none, err := h.Provider.Lookup(ctxT(t), provider.LookupRequest{Key: r.Key + "_absent", ProviderKey: r.ProviderKey + "_absent", From: from, To: time.Now().Add(time.Hour)})
	if err != nil || len(none.Charges) != 0 {
		t.Fatalf("lookup of an unknown key: %+v %v, want none", none, err)
	}
}

func testWebhook(t *testing.T, h Harness) {
	good, bad := h.Webhook(t)
	if good != nil {
		t.Fatalf("a correctly signed event was refused: %v", good)
	}
	if bad == nil {
		t.Fatal("a wrongly signed event was accepted")
	}
}
