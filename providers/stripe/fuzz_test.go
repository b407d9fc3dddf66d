package stripe_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/providers/internal/testkit"
	paystripe "github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

const fuzzSecret = "whsec_fuzz"

// fuzzDeliveries returns the bodies of the deliveries the fake emits for a
// charge, a declined charge and two partial refunds (payment_intent.succeeded,
// payment_intent.payment_failed, charge.refunded with and without a previous
// amount_refunded), exactly as it POSTs them.
func fuzzDeliveries(f *testing.F) [][]byte {
	f.Helper()
	srv := stripetest.NewServer(&stripetest.Config{WebhookSecret: fuzzSecret})
	defer srv.Close()
	p, err := paystripe.New(&paystripe.Config{
		SecretKey:  "sk_test_fuzz",
		BaseURL:    srv.URL(),
		HTTPClient: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}},
	})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	ch, err := p.Charge(ctx, provider.ChargeRequest{Key: "fz-1", ProviderKey: "fz-1_charge", Amount: testkit.EUR("20.00"),
		PaymentMethod: stripetest.PaymentMethodVisa, Description: "order fz-1", Metadata: map[string]string{"order": "fz-1"}})
	if err != nil {
		f.Fatal(err)
	}
	_, _ = p.Charge(ctx, provider.ChargeRequest{Key: "fz-2", ProviderKey: "fz-2_charge", Amount: testkit.EUR("5.00"),
		PaymentMethod: stripetest.PaymentMethodInsufficientFunds}) // a decline: its event is what we want
	for i, amount := range []string{"3.00", "4.50"} {
		key := "fz-1-refund-" + strconv.Itoa(i)
		if _, err := p.Refund(ctx, provider.RefundRequest{Key: key, ProviderKey: key, ChargeID: ch.ProviderID, Amount: testkit.EUR(amount)}); err != nil {
			f.Fatal(err)
		}
	}
	var bodies [][]byte
	for _, ev := range srv.Events() {
		// A real delivery verifies as an event: the seeds start where the adapter accepts.
		if _, err := paystripe.VerifyWebhook(ev.Payload, stripetest.Sign(ev.Payload, fuzzSecret, time.Now()), []string{fuzzSecret}, 0); err != nil {
			f.Fatalf("the fake's %s: %v", ev.Type, err)
		}
		bodies = append(bodies, ev.Payload)
	}
	if len(bodies) < 4 {
		f.Fatalf("the fake emitted %d events, want at least 4", len(bodies))
	}
	return bodies
}

// fuzzSeeds adds each delivery, and truncated, tampered and malformed
// variants of it, as args(body) returns them.
func fuzzSeeds(f *testing.F, add func(body []byte)) {
	for _, body := range fuzzDeliveries(f) {
		add(body)
		add(body[:len(body)/2])
		add(bytes.Replace(body, []byte(`"eur"`), []byte(`"xxx"`), 1))
		add(bytes.Replace(body, []byte(`"amount": 2000`), []byte(`"amount": -2000`), 1))
		add(bytes.Replace(body, []byte(`"object": "event"`), []byte(`"object": "charge"`), 1))
		add(bytes.Replace(body, []byte(`"amount_refunded": 300`), []byte(`"amount_refunded": 3e2`), 1))
	}
	for _, body := range []string{
		``, `null`, `[]`, `{}`, `"evt"`, `{"id":"evt_1"}`,
		`{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{"object":"customer","metadata":{"payonce_key":"k"}}}}`,
		`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"object":"charge"}}}`,
		`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","id":"pi_1","amount":1,"currency":"jpy"}}}`,
		`{"id":"evt_1","type":"charge.refunded","data":{"object":{"object":"charge","amount_refunded":100,"currency":"eur"},"previous_attributes":{"amount_refunded":200}}}`,
		`{"id":"evt_1","type":"charge.refunded","data":{"object":{"object":"charge","amount_refunded":100,"currency":"eur"},"previous_attributes":{"amount_refunded":"x"}}}`,
		// Regression: a previous amount_refunded past int64 converted to a negative int64,
		// passed the bound and made a negative refund.
		`{"id":"evt_1","type":"charge.refunded","data":{"object":{"object":"charge","amount_refunded":100,"currency":"eur"},"previous_attributes":{"amount_refunded":1e19}}}`,
		`{"id":"evt_1","type":"charge.refunded","data":{"object":{"object":"charge","amount_refunded":100,"currency":"eur"},"previous_attributes":{"amount_refunded":9223372036854775808}}}`,
		`{"id":"evt_1","type":"refund.failed","data":{"object":{"object":"refund","id":"re_1","amount":100,"currency":"usd","status":"failed","failure_reason":"expired_or_canceled_card"}}}`,
		`{"id":"evt_1","type":"refund.updated","data":null}`,
	} {
		add([]byte(body))
	}
}

func fuzzVerifier(f *testing.F) *paystripe.Provider {
	p, err := paystripe.New(&paystripe.Config{SecretKey: "sk_test_verify", WebhookSecrets: []string{"whsec_old", fuzzSecret}})
	if err != nil {
		f.Fatal(err)
	}
	return p
}

var knownKinds = map[provider.EventKind]bool{
	provider.EventChargeSucceeded: true, provider.EventChargeFailed: true, provider.EventChargePending: true,
	provider.EventRefundSucceeded: true, provider.EventRefundFailed: true, provider.EventRefundReversed: true, provider.EventIgnored: true,
}

// verifyTwice verifies a delivery twice and fails t unless both answers are
// the same.
func verifyTwice(t *testing.T, p *paystripe.Provider, sig string, body []byte) ([]provider.WebhookEvent, error) {
	t.Helper()
	h := http.Header{"Stripe-Signature": {sig}}
	evs, err := p.VerifyWebhook(context.Background(), h, body)
	evs2, err2 := p.VerifyWebhook(context.Background(), h, body)
	if !reflect.DeepEqual(evs, evs2) || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
		t.Fatalf("not deterministic: %v, %v then %v, %v", evs, err, evs2, err2)
	}
	return evs, err
}

// FuzzVerifyWebhookSigned: a body signed with a configured secret at a fresh
// timestamp is either an event in payonce's terms or malformed, never a
// signature error.
func FuzzVerifyWebhookSigned(f *testing.F) {
	p := fuzzVerifier(f)
	fuzzSeeds(f, func(body []byte) { f.Add(body) })
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := verifyTwice(t, p, stripetest.Sign(body, fuzzSecret, time.Now()), body)
		if err != nil {
			if !errors.Is(err, provider.ErrWebhookMalformed) || errors.Is(err, provider.ErrWebhookSignature) || evs != nil {
				t.Fatalf("correctly signed body refused as other than malformed: %v (events %v)", err, evs)
			}
			return
		}
		if len(evs) != 1 {
			t.Fatalf("%d events, want 1", len(evs))
		}
		ev := evs[0]
		if ev.ID == "" || ev.Type == "" || !knownKinds[ev.Kind] || !bytes.Equal(ev.Body, body) {
			t.Fatalf("event %+v (Body %q) from %q", ev, ev.Body, body)
		}
		// The adapter's event is the one stripe-go's verification returns.
		raw, err := paystripe.VerifyWebhook(body, stripetest.Sign(body, fuzzSecret, time.Now()), []string{fuzzSecret}, 0)
		if err != nil || raw.ID != ev.ID || string(raw.Type) != ev.Type {
			t.Fatalf("stripe-go's event %s %s (%v), the adapter's %s %s", raw.ID, raw.Type, err, ev.ID, ev.Type)
		}
		// charge.refunded: what this refund added, amount_refunded less its previous value,
		// is never negative when Stripe sends the previous value.
		if _, prev := raw.Data.PreviousAttributes["amount_refunded"]; prev && ev.Type == "charge.refunded" && ev.Amount.IsNegative() {
			t.Fatalf("charge.refunded read as a refund of %v", ev.Amount)
		}
		if ev.Body != nil && len(body) > 0 && &ev.Body[0] == &body[0] {
			t.Fatal("Body aliases the caller's buffer")
		}
	})
}

var headerTimestamps = regexp.MustCompile(`t=(-?[0-9]+)`)

// signsBody reports whether header carries a v1 signature of body under
// fuzzSecret for one of the timestamps it names: only then may it verify.
func signsBody(header string, body []byte) bool {
	for _, m := range headerTimestamps.FindAllStringSubmatch(header, -1) {
		mac := hmac.New(sha256.New, []byte(fuzzSecret))
		mac.Write([]byte(m[1] + "."))
		mac.Write(body)
		if strings.Contains(strings.ToLower(header), hex.EncodeToString(mac.Sum(nil))) {
			return true
		}
	}
	return false
}

// FuzzVerifyWebhookTampered: a body or a signature changed after signing, a
// stale or shifted timestamp, a signature under another secret and any header
// that does not sign the body are refused as signature errors, never as
// events.
func FuzzVerifyWebhookTampered(f *testing.F) {
	p := fuzzVerifier(f)
	fuzzSeeds(f, func(body []byte) {
		f.Add(body, append(bytes.Clone(body), ' '), "t=1,v1=00", int64(1))
		f.Add(body, bytes.Replace(body, []byte("succeeded"), []byte("failed"), 1), "v1=zz,t=x", int64(-1))
		f.Add(body, body[:len(body)/3], "", int64(301))
	})
	f.Add([]byte(`{}`), []byte(`{ }`), "t=1700000000,v1="+strings.Repeat("0", 64)+",v0=ab", int64(1<<40))
	f.Add([]byte(`{}`), []byte(`{}`), "t=1,t=2,v1=a,v1", int64(-1<<62))
	f.Fuzz(func(t *testing.T, body, tampered []byte, header string, shift int64) {
		now := time.Now()
		good := stripetest.Sign(body, fuzzSecret, now)
		refused := func(what, sig string, body []byte) {
			t.Helper()
			evs, err := verifyTwice(t, p, sig, body)
			if !errors.Is(err, provider.ErrWebhookSignature) || errors.Is(err, provider.ErrWebhookMalformed) || evs != nil {
				t.Fatalf("%s: %q with %q: got %v, %v; want a signature error and no events", what, sig, body, evs, err)
			}
		}
		if !bytes.Equal(tampered, body) {
			refused("body changed after signing", good, tampered)
		}
		if shift != 0 {
			ts, v1, _ := strings.Cut(good, ",")
			n, _ := strconv.ParseInt(strings.TrimPrefix(ts, "t="), 10, 64)
			refused("timestamp shifted", "t="+strconv.FormatInt(n+shift, 10)+","+v1, body)
		}
		age := paystripe.DefaultWebhookTolerance + time.Second
		if shift > 0 && shift < 1<<31 {
			age += time.Duration(shift) * time.Second
		}
		refused("stale timestamp", stripetest.Sign(body, fuzzSecret, now.Add(-age)), body)
		refused("another secret", stripetest.Sign(body, "whsec_other", now), body)
		if sig := "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + header; !signsBody(sig, body) {
			refused("signature replaced", sig, body)
		}
		if !signsBody(header, body) {
			refused("fuzzed header", header, body)
		}
	})
}
