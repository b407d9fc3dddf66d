package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/internal/fakes"
	"github.com/payonce/payonce/providers/stripe/stripetest"
)

// The storm's saga phase: checkouts (the example's POST /checkout: reserve
// stock, charge, record the order) of two scarce skus, by customers who
// double-click and retry, through the providers and their faults. Every
// checkout must end COMPLETED or ROLLED_BACK (or NEEDS_REVIEW with its
// reason), no sku sold beyond its stock, one charge per completed
// checkout, and no rolled-back checkout left charged.

type checkout struct {
	customer, key, sku, provider, method string
	status, failedStep, reason           string
}

type checkoutResult struct {
	checkouts                                 []*checkout
	completed, rolledBack, review, outOfStock int
	declined, charges                         int
	stock                                     map[string][2]int // sku -> initial stock, sold
	problems                                  []string
}

var checkoutStock = map[string]int{"demo-book": 12, "demo-pen": 8}

func checkoutPhase(ctx context.Context, hc *http.Client, base string, pool *pgxpool.Pool, fk *fakes.Set, providers []string, rng *rand.Rand) (checkoutResult, error) {
	var r checkoutResult
	for sku, stock := range checkoutStock {
		code, _, err := send(hc, base+"/inventory", "ops", "", fmt.Sprintf(`{"sku": %q, "stock": %d}`, sku, stock), 0)
		if err != nil || code/100 != 2 {
			return r, fmt.Errorf("setting the stock of %s: %d %v", sku, code, err)
		}
	}
	skus := []string{"demo-book", "demo-book", "demo-pen"}
	for i := range 40 {
		method := stripetest.PaymentMethodVisa
		if rng.IntN(10) == 0 {
			method = stripetest.PaymentMethodDeclined
		}
		r.checkouts = append(r.checkouts, &checkout{customer: fmt.Sprintf("cus_%03d", 500+i%10), key: fmt.Sprintf("cart-%04d", i),
			sku: skus[rng.IntN(len(skus))], provider: providers[i%len(providers)], method: method})
	}
	var wg sync.WaitGroup
	for _, c := range r.checkouts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"sku": %q, "qty": 1, "amount": "15.00", "currency": "EUR", "payment_method": %q, "provider": %q, "recipient": "acct_shop"}`,
				c.sku, c.method, c.provider)
			// A double click: two at once, one of them impatient.
			var dc sync.WaitGroup
			for _, timeout := range []time.Duration{0, 30 * time.Millisecond} {
				dc.Add(1)
				go func() {
					defer dc.Done()
					_, _, _ = send(hc, base+"/checkout", c.customer, c.key, body, timeout)
				}()
			}
			dc.Wait()
			// Then retried with the same key until it is final.
			for attempt := 0; attempt < 200; attempt++ {
				_, m, err := send(hc, base+"/checkout", c.customer, c.key, body, 5*time.Second)
				if err == nil {
					if s, _ := m["status"].(string); s == "COMPLETED" || s == "ROLLED_BACK" || s == "NEEDS_REVIEW" {
						c.status = s
						c.failedStep, _ = m["failed_step"].(string)
						c.reason, _ = m["reason"].(string)
						return
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return r, r.check(ctx, pool, fk)
}

func (r *checkoutResult) check(ctx context.Context, pool *pgxpool.Pool, fk *fakes.Set) error {
	r.stock = map[string][2]int{}
	for sku, initial := range checkoutStock {
		var left, sold int
		if err := pool.QueryRow(ctx, `SELECT stock FROM inventory WHERE sku = $1`, sku).Scan(&left); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(qty), 0) FROM orders WHERE sku = $1`, sku).Scan(&sold); err != nil {
			return err
		}
		r.stock[sku] = [2]int{initial, sold}
		if sold > initial || left < 0 || left+sold != initial {
			r.problems = append(r.problems, fmt.Sprintf("%s: stock %d, %d sold, %d left", sku, initial, sold, left))
		}
	}
	for _, c := range r.checkouts {
		key, err := idempotency.ComposeKey(c.customer, "charge", c.key+"_charge")
		if err != nil {
			return err
		}
		n := fk.Charges(c.provider, key)
		var intent string
		_ = pool.QueryRow(ctx, `SELECT status FROM payment_intents WHERE idempotency_key = $1 AND user_id = $2`, key, c.customer).Scan(&intent)
		var refunded bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payment_intents WHERE kind = 'REFUND' AND charge_key = $1 AND status = 'SUCCEEDED')`, key).Scan(&refunded)
		switch c.status {
		case "COMPLETED":
			r.completed++
			r.charges += n
			if n != 1 || intent != "SUCCEEDED" {
				r.problems = append(r.problems, fmt.Sprintf("checkout %s/%s completed with %d charge(s) (intent %q)", c.customer, c.key, n, intent))
			}
		case "ROLLED_BACK":
			r.rolledBack++
			switch {
			case c.failedStep == "reserve":
				r.outOfStock++
			case c.failedStep == "charge":
				r.declined++
			}
			if intent == "SUCCEEDED" && !refunded {
				r.problems = append(r.problems, fmt.Sprintf("checkout %s/%s rolled back but still charged", c.customer, c.key))
			}
			if n > 1 {
				r.problems = append(r.problems, fmt.Sprintf("checkout %s/%s: %d charges", c.customer, c.key, n))
			}
		case "NEEDS_REVIEW":
			r.review++
			if c.reason == "" {
				r.problems = append(r.problems, fmt.Sprintf("checkout %s/%s in review without a reason", c.customer, c.key))
			}
		default:
			r.problems = append(r.problems, fmt.Sprintf("checkout %s/%s never finished", c.customer, c.key))
		}
	}
	return nil
}

// line is the saga phase's summary line.
func (r checkoutResult) line() string {
	var sold []string
	for _, sku := range []string{"demo-book", "demo-pen"} {
		s := r.stock[sku]
		sold = append(sold, fmt.Sprintf("%s %d/%d", sku, s[1], s[0]))
	}
	oversold := "never oversold"
	if len(r.problems) > 0 {
		oversold = "PROBLEMS below"
	}
	return fmt.Sprintf("  checkouts (sagas)       %d: %d COMPLETED, %d ROLLED_BACK (out of stock %d, declined %d), %d NEEDS_REVIEW; sold %s, stock %s; %d charges for %d completed",
		len(r.checkouts), r.completed, r.rolledBack, r.outOfStock, r.declined, r.review, strings.Join(sold, ", "), oversold, r.charges, r.completed)
}
