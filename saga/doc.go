// Package saga makes multi-step actions safe to retry: a saga is a named,
// ordered list of steps, each with an action and an optional
// compensation, run once per (scope, key) whatever the retries and
// crashes. A retry resumes from the first step not done, never repeating
// a done one; a permanent failure compensates the done steps in reverse
// order.
//
// # Keys
//
// The saga's key is claimed through the idempotency core (its record is
// "{scope}_saga_{key}"): one driver at a time across processes, a lease
// kept alive by heartbeats, fencing. A concurrent duplicate gets
// idempotency.ErrInProgress; a retry of a finished saga gets its stored
// [Result] byte for byte; the same key with another input (or another
// definition) is refused with idempotency.ErrFingerprintMismatch and
// changes nothing.
//
// Every step gets its own sub-key, [Call.Key]: "<key>_<step>" for its
// action, "<key>_<step>_compensate" for its compensation ([SubKey],
// [CompensationKey]). Derive every reference from it (a charge's
// idempotency key, a row's unique key): a step re-run after a crash or an
// unknown outcome sends the same references, so its effect happens once.
//
// # Steps and their states
//
// A [Local] step writes in this database through [Call.Tx]: its writes and
// its transition to DONE commit in one transaction. A [Remote] step calls
// outside; its start is recorded before the call and its outcome after,
// and it must be idempotent by its sub-key. Step outputs (JSON) are stored
// and given to later steps and to compensations ([Call.DecodeOutput]: the
// charge's provider id to the refund).
//
// A step's error decides what follows (see [Class] and [DefaultClassify]):
//
//   - permanent ([Fail], a payment's decline): the step is FAILED, the saga
//     COMPENSATING; the DONE steps are compensated in reverse order, each
//     compensation retried with its own sub-key until it succeeds, and the
//     saga ends ROLLED_BACK. A compensation that fails permanently ends it
//     NEEDS_REVIEW with the reason: never silently dropped.
//   - unknown ([Unknown], a payment whose outcome is unknown): the step is
//     UNKNOWN: never compensated blindly, never re-run with new
//     references. The lease is released and the caller gets a
//     [PendingError]; a retry, or [Orchestrator.Recover], runs the step
//     again with the same sub-key.
//   - waiting ([Wait]: what the step or compensation depends on has not
//     happened yet, a charge still pending): not retried within the run;
//     the caller gets a *PendingError with RetryAfter, and the saga is
//     rescheduled: recovery leaves it alone until then. The call decides
//     again on its next run, and bounds its own wait.
//   - transient (anything else): as unknown, the step staying PENDING.
//
// A compensation that finds nothing to undo (the charge was declined
// after its step was done) returns [NothingToUndo]: the step is
// COMPENSATED with the reason as its note.
//
// The saga's final answer (COMPLETED with the last step's output,
// ROLLED_BACK with the failing step and its reason, or NEEDS_REVIEW) is
// stored in its idempotency record, in the transaction of its last
// transition, and replayed. [Orchestrator.State] reads a saga's rows.
//
// # Recovery
//
// [Orchestrator.Recover] (scheduled by [Orchestrator.Start]) finds sagas
// left mid-way (their lease ended, or no progress for a while) and drives
// them forward or back, claiming each exactly as a client's retry does.
// A saga that waits ([Wait]) is left alone until its wake time
// ([Saga].WakeAt), then driven again (counted woken, not stuck).
// It needs the definitions: register them ([Orchestrator.Register]) in
// every process that runs or recovers sagas.
//
// # Charges
//
// A step that charges through package payments is compensated by
// [RefundCharge]. payments.Client.Charge answers PENDING or
// REQUIRES_ACTION (3-D Secure) without an error: the step is then DONE
// while its charge is still open, and it may yet be declined (by a
// webhook, or the reconciler) or succeed. So a plain refund cannot undo
// it: a charge that did not succeed has nothing to refund, and payments
// refuses the refund ("no succeeded charge"), which no retry mends.
// RefundCharge reads the charge's intent on each run instead: it refunds
// a charge that SUCCEEDED (once, with the compensation's key), finds
// nothing to undo for one DECLINED or FAILED, waits ([Wait]) while it is
// open, up to RefundConfig.SettleWithin after its step was done
// ([DefaultSettleWithin], 24 hours), and stops the saga in NEEDS_REVIEW,
// with the reason, past that bound or when the charge itself is in
// review. Later steps run while the charge is open: a step that must not
// (shipping goods) reads the intent (payments.Client.Intent) and waits or
// fails as it says.
//
// # Example
//
// A checkout: reserve stock (local), charge (remote, through payments),
// ship (local).
//
//	orch, err := saga.New(pool, nil)
//	...
//	refund, err := saga.RefundCharge(pay, nil) // the charge step's own sub-key, 24h bound
//	...
//	err = orch.Register(saga.Definition{Name: "checkout", Steps: []saga.Step{
//		{Name: "reserve", Kind: saga.Local,
//			Action: func(ctx context.Context, c *saga.Call) (any, error) {
//				_, err := c.Tx.Exec(ctx, `UPDATE stock SET held = held + 1 WHERE sku = $1`, sku)
//				return nil, err
//			},
//			Compensate: func(ctx context.Context, c *saga.Call) error {
//				_, err := c.Tx.Exec(ctx, `UPDATE stock SET held = held - 1 WHERE sku = $1`, sku)
//				return err
//			}},
//		{Name: "charge", Kind: saga.Remote,
//			Action: func(ctx context.Context, c *saga.Call) (any, error) {
//				return pay.Charge(ctx, payments.ChargeParams{Scope: c.Scope, Key: c.Key, Provider: "stripe",
//					Amount: price, Recipient: "acct_shop", PaymentMethod: pm})
//			},
//			Compensate: refund}, // never a refund of a charge that did not succeed
//		{Name: "ship", Kind: saga.Local,
//			Action: func(ctx context.Context, c *saga.Call) (any, error) {
//				var id int64
//				err := c.Tx.QueryRow(ctx, `INSERT INTO shipments (order_key) VALUES ($1) RETURNING id`, c.Key).Scan(&id)
//				return map[string]int64{"shipment": id}, err
//			}},
//	}})
//	...
//	res, err := orch.Run(ctx, saga.RunParams{Saga: "checkout", Scope: userID, Key: orderKey, Input: order})
//	switch {
//	case errors.Is(err, saga.ErrPending): // 202: still going; retry with the same key
//	case errors.Is(err, saga.ErrRolledBack): // res.FailedStep, res.Reason
//	}
//
// # Schema
//
// Tables sagas and saga_steps are created by package migrations (versions
// 0011 and 0014).
package saga
