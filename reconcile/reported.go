package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
)

// stuckRecords reports idempotency records PROCESSING long after their
// lease ended (a crashed holder whose key nobody retried), listed by the
// store.
func (r *Reconciler) stuckRecords(ctx context.Context, rep *Report) error {
	res, err := r.store.Stuck(ctx, pgstore.StuckParams{OlderThan: r.cfg.StuckAfter, Limit: r.cfg.Batch})
	if err != nil {
		return fmt.Errorf("reconcile: stuck records: %w", err)
	}
	items := make([]Item, 0, len(res.Records))
	for _, l := range res.Records {
		ended := l.CreatedAt // a record without a lease end waits since its claim
		if l.LockedUntil != nil {
			ended = *l.LockedUntil
		}
		items = append(items, Item{Kind: KindStuckRecord, Action: ActionReported, LocalState: "PROCESSING",
			Scope: l.Scope, IntentKey: l.Key, Age: l.DatabaseNow.Sub(l.CreatedAt),
			Detail: fmt.Sprintf("lease ended %s ago, holder version %d; a retry of the key reclaims it (payonce release to force)",
				l.DatabaseNow.Sub(ended).Round(time.Second), l.LockVersion)})
	}
	return r.reportAll(ctx, rep, items)
}

// webhookDivergences reports events stored since the previous run that
// named no local intent, contradicted a final one, announced a second
// provider object for one, or overturned a final one (booked, reversed or
// sent to review by the receiver: see payments.EventSucceededAfterDecline).
func (r *Reconciler) webhookDivergences(ctx context.Context, rep *Report) error {
	before := len(rep.Items)
	defer func() {
		for _, x := range rep.Items[before:] {
			if x.Action == ActionNeedsReview { // flagged by the receiver: counted as the run's reviews are
				rep.NeedsReview++
			}
		}
	}()
	var since *time.Time
	if err := r.pool.QueryRow(ctx, lastRunStartSQL, rep.RunID).Scan(&since); err != nil {
		return fmt.Errorf("reconcile: webhook events: %w", err)
	}
	var after time.Time
	if since != nil {
		after = *since
	}
	events, err := payments.DivergentEvents(ctx, r.pool, after) // no client needed: New accepts a nil one
	if err != nil {
		return fmt.Errorf("reconcile: webhook events: %w", err)
	}
	found := make([]Item, 0, len(events))
	for _, e := range events {
		x := Item{Provider: e.Provider, Detail: e.Detail, Scope: e.Scope, IntentKey: e.IntentKey, Currency: e.Currency,
			Age: e.Age, Action: ActionReported}
		refund := e.Kind == provider.EventRefundFailed || e.Kind == provider.EventRefundReversed
		switch e.Outcome {
		case payments.EventConflict:
			x.Kind = KindWebhookConflict
		case payments.EventSecondObject:
			x.Kind = KindDuplicateAtProvider
		case payments.EventSucceededAfterDecline:
			x.Kind, x.Action, x.IntentKind, x.LocalState = KindSucceededAfterDecline, ActionCompleted, payments.KindCharge, "DECLINED"
		case payments.EventRefundFailedAfterSuccess:
			x.Kind, x.Action, x.IntentKind, x.LocalState = KindRefundFailedAfterSuccess, ActionReversed, payments.KindRefund, "SUCCEEDED"
		case payments.EventNeedsReview:
			x.Kind, x.Action, x.IntentKind, x.LocalState = KindSucceededAfterDecline, ActionNeedsReview, payments.KindCharge, "DECLINED"
			if refund {
				x.Kind, x.IntentKind, x.LocalState = KindRefundFailedAfterSuccess, payments.KindRefund, "SUCCEEDED"
			}
		default:
			x.Kind = KindUnmatchedProviderObject
		}
		x.ProviderState = e.EventType + " " + e.ProviderID + " (event " + e.EventID + ")"
		found = append(found, x)
	}
	return r.reportAll(ctx, rep, found)
}

// reportAll stores items that need no repair and adds them to the report.
func (r *Reconciler) reportAll(ctx context.Context, rep *Report, items []Item) error {
	for _, x := range items {
		if err := insertItem(ctx, r.pool, rep.RunID, x); err != nil {
			return err
		}
		rep.add(x)
		r.metrics.divergence(ctx, x)
	}
	return nil
}
