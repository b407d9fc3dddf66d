package stripe

import (
	"context"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/payonce/payonce/money"
	"github.com/payonce/payonce/payments/provider"
)

// Lookup returns the PaymentIntents whose metadata carries req.Key under
// [MetadataKey] and that were created in [req.From, req.To] (Stripe's
// clock, whole seconds; a zero To is open). req.ProviderKey and
// req.ProviderID are not used: the metadata key marks every attempt.
//
// It answers from one of two Stripe APIs:
//
//   - List, consistent: when req.From is set, Lookup lists the
//     PaymentIntents created in the window (created[gte] From's second,
//     created[lte] To's second: Stripe stamps created in whole seconds)
//     and keeps those carrying the key. The result is Consistent: Stripe
//     documents its List APIs as free of Search's delay
//     (https://docs.stripe.com/search#data-freshness). It takes one
//     request per 100 PaymentIntents in the window, so the narrower the
//     window, the cheaper: payments narrows it to the attempt's sends
//     ([payments.Client.LookupAttempt]), against Stripe's clock as read
//     by [Provider.ReadClock] (each page's Date header is such a reading).
//   - Search, eventually consistent: when req.From is zero (no creation
//     window: a List scan would cover the account's whole history), or when
//     the window holds more than Config.LookupScanLimit PaymentIntents,
//     Lookup asks GET /v1/payment_intents/search for
//     metadata['payonce_key']:'<key>' (the key escaped for Stripe's query
//     language) and keeps the PaymentIntents whose key matches exactly
//     (Search compares values case-insensitively) and that lie in the
//     window, next to what the abandoned scan had found. The result is not
//     Consistent.
//
// Stripe's search index lags behind its writes: usually by under a minute,
// by up to an hour during outages. A PaymentIntent that Search returns
// exists; one it does not return may exist all the same. An empty
// inconsistent result is therefore no proof that an attempt left nothing
// at Stripe: do not start a new attempt on it; ask again with a creation
// window, or after the lag. (Search is also not offered to accounts in
// India: there the fallback fails with an *[provider.InvalidRequestError].)
//
// With req.WithRefunds, each charge found also reports what Stripe refunded
// of it: Lookup lists the PaymentIntent's refunds (GET /v1/refunds with
// payment_intent, every page) and sets Refunded to the sum of those in
// status succeeded (pending, failed and canceled refunds moved no money
// back; a zero Money of the charge's currency when there are none) and
// RefundsKnown. That is one more request per charge; without
// req.WithRefunds none is sent and RefundsKnown stays false. Refunds are
// read from List, which is consistent, whichever API found the charge.
//
// Errors: *[provider.InvalidRequestError], *[provider.NotSentError],
// *[provider.UnknownOutcomeError] (a read: retrying is harmless).
func (p *Provider) Lookup(ctx context.Context, req provider.LookupRequest) (provider.LookupResult, error) {
	if req.Key == "" {
		return provider.LookupResult{}, invalid("Key", "is required")
	}
	if !req.From.IsZero() && !req.To.IsZero() && req.To.Before(req.From) {
		return provider.LookupResult{}, invalid("To", "is before From")
	}
	res, err := p.find(ctx, req)
	if err != nil || !req.WithRefunds {
		return res, err
	}
	for i := range res.Charges {
		if err := p.addRefunds(ctx, &res.Charges[i]); err != nil {
			return provider.LookupResult{}, err
		}
	}
	return res, nil
}

// find answers Lookup's question without refunds: List over req's window,
// or Search.
func (p *Provider) find(ctx context.Context, req provider.LookupRequest) (provider.LookupResult, error) {
	if req.From.IsZero() {
		return p.search(ctx, req, nil)
	}
	found, complete, err := p.scan(ctx, req)
	if err != nil {
		return provider.LookupResult{}, err
	}
	if !complete {
		return p.search(ctx, req, found)
	}
	return provider.LookupResult{Charges: found, Consistent: true}, nil
}

// addRefunds sets ch.Refunded to the sum of the PaymentIntent's succeeded
// refunds, listed page by page, and ch.RefundsKnown. A charge whose
// currency money does not know keeps RefundsKnown false (it cannot happen:
// the currency is the one payonce sent).
func (p *Provider) addRefunds(ctx context.Context, ch *provider.ChargeResult) error {
	total, err := money.FromMinor(0, ch.Amount.Currency())
	if ch.Amount.Currency() == "" || err != nil {
		return nil
	}
	params := &stripego.RefundListParams{PaymentIntent: stripego.String(ch.ProviderID)}
	params.Limit = stripego.Int64(lookupPageSize)
	var sent sentTracker
	params.Context = sent.trace(ctx)

	it := p.refunds.List(params)
	for it.Next() {
		re := it.Refund()
		if re.Status != stripego.RefundStatusSucceeded {
			continue
		}
		amount, err := FromAmount(re.Amount, string(ch.Amount.Currency()))
		if err == nil && !strings.EqualFold(string(re.Currency), string(ch.Amount.Currency())) {
			err = fmt.Errorf("it is in %q, the PaymentIntent in %s", re.Currency, ch.Amount.Currency())
		}
		if err == nil {
			total, err = total.Add(amount)
		}
		if err != nil {
			return &provider.UnknownOutcomeError{Provider: providerName,
				Err: fmt.Errorf("refund %s of PaymentIntent %s: %w", re.ID, ch.ProviderID, err)}
		}
	}
	if err := it.Err(); err != nil {
		return classify(err, &sent)
	}
	ch.Refunded, ch.RefundsKnown = total, true
	return nil
}

// scan lists the PaymentIntents created in req's window and returns those
// carrying req.Key. complete is false when it gave up after
// Config.LookupScanLimit PaymentIntents; found then holds what it saw.
func (p *Provider) scan(ctx context.Context, req provider.LookupRequest) (found []provider.ChargeResult, complete bool, err error) {
	params := &stripego.PaymentIntentListParams{}
	// One more than the limit tells "exactly the limit" from "more".
	params.Limit = stripego.Int64(int64(min(lookupPageSize, p.scanLimit+1)))
	params.CreatedRange = &stripego.RangeQueryParams{GreaterThanOrEqual: req.From.Unix()}
	if !req.To.IsZero() {
		params.CreatedRange.LesserThanOrEqual = windowEnd(req.To)
	}
	var sent sentTracker
	params.Context = sent.trace(ctx)

	found = []provider.ChargeResult{}
	seen := 0
	// Each page's Date header is a reading of Stripe's clock
	// (ReadClock).
	before := time.Now()
	it := p.paymentIntents.List(params)
	page := it.PaymentIntentList()
	p.clock.record(page.LastResponse, before, time.Now())
	for {
		before = time.Now()
		if !it.Next() {
			break
		}
		if l := it.PaymentIntentList(); l != page {
			page = l
			p.clock.record(l.LastResponse, before, time.Now())
		}
		if seen++; seen > p.scanLimit {
			return found, false, nil
		}
		if pi := it.PaymentIntent(); pi.Metadata[MetadataKey] == req.Key {
			found = append(found, chargeResult(pi, money.Money{}))
		}
	}
	if err := it.Err(); err != nil {
		return nil, false, classify(err, &sent)
	}
	return found, true, nil
}

// search asks the Search API for req.Key and returns its exact matches in
// req's window after the charges already found by a scan.
func (p *Provider) search(ctx context.Context, req provider.LookupRequest, found []provider.ChargeResult) (provider.LookupResult, error) {
	params := &stripego.PaymentIntentSearchParams{}
	params.Query = metadataQuery(MetadataKey, req.Key)
	params.Limit = stripego.Int64(lookupPageSize)
	var sent sentTracker
	params.Context = sent.trace(ctx)

	res := provider.LookupResult{Charges: append([]provider.ChargeResult{}, found...), Consistent: false}
	known := make(map[string]bool, len(found))
	for _, c := range found {
		known[c.ProviderID] = true
	}
	it := p.paymentIntents.Search(params)
	for it.Next() {
		pi := it.PaymentIntent()
		if pi.Metadata[MetadataKey] != req.Key || !inWindow(pi.Created, req) || known[pi.ID] {
			continue
		}
		known[pi.ID] = true
		res.Charges = append(res.Charges, chargeResult(pi, money.Money{}))
	}
	if err := it.Err(); err != nil {
		return provider.LookupResult{}, classify(err, &sent)
	}
	return res, nil
}

// windowEnd is the last whole second of a window ending at to: created is
// in whole seconds, so a charge created within to's second is kept.
func windowEnd(to time.Time) int64 { return to.Add(time.Second - 1).Unix() }

func inWindow(created int64, req provider.LookupRequest) bool {
	return (req.From.IsZero() || created >= req.From.Unix()) && (req.To.IsZero() || created <= windowEnd(req.To))
}

// queryEscaper escapes a string for a quoted value of Stripe's search query
// language, where a backslash escapes the next character: without it, a
// quote in a key would end the value and let the rest of the key add
// clauses to the query.
var queryEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`)

// metadataQuery is the search query metadata['key']:'value'.
func metadataQuery(key, value string) string {
	return "metadata['" + queryEscaper.Replace(key) + "']:'" + queryEscaper.Replace(value) + "'"
}
