package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// payment is one customer's payment and what its clients saw.
type payment struct {
	provider string
	// abandoned: the client sends once and never retries, whatever the
	// answer (the reconciler resolves it).
	abandoned           bool
	customer, key       string
	amount, currency    string
	method              string
	sends               int
	mu                  sync.Mutex
	codes               map[int]int
	providerIDs         map[string]bool
	final               int // last final status code seen (201, 202, 402, 422), 0 if none
	status              string
	finals              map[string]bool // every status a final answer named
	unknownSeen         bool
	refundKey, refunded string
}

func (p *payment) record(code int, body map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.codes[code]++
	switch code {
	case 201, 202, 402, 422:
		p.final = code
		if s, ok := body["status"].(string); ok {
			p.status = s
			p.finals[s] = true
		}
		if id, ok := body["provider_id"].(string); ok && id != "" {
			p.providerIDs[id] = true
		}
	case 503:
		p.unknownSeen = true
	}
}

func makePayments(c stormConfig, rng *rand.Rand, providers []string) []*payment {
	currencies := []string{"EUR", "USD", "GBP"}
	var pays []*payment
	for i := 0; i < c.payments; i++ {
		method := stripetest.PaymentMethodVisa
		switch x := rng.IntN(100); {
		case x < 6:
			method = stripetest.PaymentMethodDeclined
		case x < 10:
			method = stripetest.PaymentMethodInsufficientFunds
		case x < 12:
			method = stripetest.PaymentMethodAuthenticationRequired
		}
		cents := 100 + rng.IntN(20000)
		pays = append(pays, &payment{
			provider: providers[i%len(providers)],
			customer: fmt.Sprintf("cus_%03d", i%c.customers),
			key:      fmt.Sprintf("order-%05d", i),
			amount:   fmt.Sprintf("%d.%02d", cents/100, cents%100),
			currency: currencies[rng.IntN(len(currencies))],
			method:   method,
			sends:    2 + rng.IntN(4),
			// One payment in ten: a single send, never retried.
			abandoned: i%10 == 7,
			codes:     map[int]int{}, providerIDs: map[string]bool{}, finals: map[string]bool{},
		})
	}
	return pays
}

// refundKeyPrefix prefixes a payment's key to make its refund's key.
const refundKeyPrefix = "refund-"

// clientKeys are the Idempotency-Keys the payment's clients send: its
// charge's and its refund's.
func (p *payment) clientKeys() []string { return []string{p.key, refundKeyPrefix + p.key} }

func (p *payment) body() string {
	return fmt.Sprintf(`{"amount": %q, "currency": %q, "recipient": "acct_shop", "payment_method": %q, "provider": %q}`,
		p.amount, p.currency, p.method, p.provider)
}

// send posts body to url once with the Idempotency-Key key; timeout 0
// means a patient client.
func send(hc *http.Client, url, user, key, body string, timeout time.Duration) (int, map[string]any, error) {
	return request(hc, http.MethodPost, url, user, key, body, timeout)
}

// request sends one request as user (and with the Idempotency-Key key,
// unless empty) and decodes its JSON answer; timeout 0: no deadline.
func request(hc *http.Client, method, url, user, key, body string, timeout time.Duration) (int, map[string]any, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+user)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m, nil
}

// impatient sends a payment 2 to 5 times: a double click (two at once),
// then retries fired without waiting for the earlier ones, some by clients
// that give up after a few milliseconds.
func impatient(hc *http.Client, base string, p *payment, r *rand.Rand, st *stormStats) {
	var wg sync.WaitGroup
	sends := p.sends
	if p.abandoned {
		sends = 1
	}
	for i := 0; i < sends; i++ {
		timeout := time.Duration(0)
		if r.IntN(4) == 0 {
			timeout = time.Duration(5+r.IntN(60)) * time.Millisecond
		}
		delay := time.Duration(0)
		if i >= 2 {
			delay = time.Duration(r.IntN(40)) * time.Millisecond
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			st.requests.Add(1)
			code, body, err := send(hc, base+"/charges", p.customer, p.key, p.body(), timeout)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				st.gaveUp.Add(1)
			case err != nil:
				st.connErrors.Add(1)
			default:
				p.record(code, body)
			}
		}()
		if i == 0 {
			continue // the double click: the second send leaves at once
		}
		time.Sleep(time.Duration(r.IntN(15)) * time.Millisecond)
	}
	wg.Wait()
}

// resolve retries a payment with its key until a final answer.
func resolve(hc *http.Client, base string, p *payment, st *stormStats) bool {
	deadline := time.Now().Add(90 * time.Second)
	for backoff := 20 * time.Millisecond; time.Now().Before(deadline); backoff = min(backoff*2, 500*time.Millisecond) {
		st.requests.Add(1)
		code, body, err := send(hc, base+"/charges", p.customer, p.key, p.body(), 0)
		if err != nil {
			st.connErrors.Add(1)
		} else {
			p.record(code, body)
			if code == 201 || code == 202 || code == 402 || code == 422 {
				st.resolved.Add(1)
				return true
			}
		}
		time.Sleep(backoff)
	}
	return false
}

// refund refunds about half of a payment, two sends at once, retried
// until final.
func refund(hc *http.Client, base string, p *payment) bool {
	m, err := money.Parse(p.amount, money.Currency(p.currency))
	if err != nil {
		return false
	}
	minor := m.Minor()
	half, err := money.FromMinor(max(minor/2, 1), m.Currency())
	if err != nil {
		return false
	}
	p.refundKey = refundKeyPrefix + p.key
	body := fmt.Sprintf(`{"charge_key": %q, "amount": %q}`, p.key, half.AmountString())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = send(hc, base+"/refunds", p.customer, p.refundKey, body, 0)
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		code, _, err := send(hc, base+"/refunds", p.customer, p.refundKey, body, 0)
		if err == nil && (code == 201 || code == 202) { // 202: Adyen settles it by webhook
			p.refunded = half.AmountString()
			return true
		}
		if err == nil && code < 500 && code != 409 {
			return false // refused: not retried
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
