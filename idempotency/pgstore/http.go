package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/idempotency"
)

// ActionPolicy is the lease and retention of the records of one route
// action (see [MiddlewareOptions].Actions).
type ActionPolicy struct {
	// LockTimeout is the lease of a request in flight, kept alive by
	// heartbeats while the handler runs; after a crash, a retry takes the
	// key over once it ends. Default 30s, or the Executor option's.
	LockTimeout time.Duration
	// Retention is how long the outcome is replayed. It must cover every
	// retry window of the action: the clients' and those of the systems it
	// reaches (Stripe deduplicates for 24h, Adyen at least 31 days, PayPal
	// up to 45 days). Default 24h, or the Executor option's; must exceed
	// LockTimeout.
	Retention time.Duration
}

// MiddlewareOptions configures [Middleware] beyond the route table. A nil
// *MiddlewareOptions means defaults.
type MiddlewareOptions struct {
	// Actions gives the routes whose Action it names their lease and
	// retention; other routes get the defaults (30s and 24h, or the
	// Executor option's). Every name must be the Action of a route.
	Actions map[string]ActionPolicy
	// NoTx runs the handlers without a transaction of their own. Default
	// false: each protected handler runs in a transaction, from
	// [TxFromContext], in which its stored response commits: write
	// through it, and the handler's rows and the response commit
	// together, or neither does (a crash in between leaves nothing, and
	// the retry runs the handler again). The transaction holds one pool
	// connection while the handler runs: set NoTx for handlers that write
	// nothing to this database, or that spend long on other systems.
	NoTx bool
	// Store configures the store (claim strategy, keyring, pooler,
	// metrics). Default: [New]'s defaults.
	Store *Config
	// Executor is the base configuration of the executors (Logger,
	// MeterProvider, TracerProvider, Expired, heartbeats); LockTimeout
	// and Retention are each action's (see Actions). Its ReplayCache must
	// be nil: a replay cache holds a listener that only Executor.Close
	// stops, and the middleware has no Close (build the executor with
	// [NewExecutor] and pass it to idempotency.Middleware to have one).
	// Default: idempotency's defaults.
	Executor *idempotency.Config
}

// Middleware protects the routes of cfg on PostgreSQL in one call: it
// checks pool's schema, builds the store and the executors, and returns
// the net/http middleware of [idempotency.Middleware] with the
// middleware's defaults (a client key must carry 128 bits of entropy, a
// new-key rate limit per scope, 409 for a key reused with other fields,
// 5xx releasing the key). Each route's lease and retention are its
// action's (opts.Actions; 30s and 24h by default), and each protected
// handler runs in a transaction, from [TxFromContext], that commits with
// its stored response (opts.NoTx turns that off). A nil opts means
// defaults.
//
//	protect, err := pgstore.Middleware(pool, idempotency.MiddlewareConfig{
//		Scope:  func(r *http.Request) string { return userFromAuth(r) },
//		Routes: []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder", RequireKey: true}},
//	}, nil)
//	http.ListenAndServe(addr, protect(mux))
//
// It is the composable path, done for you: [New], [NewExecutor] with each
// action's lease and retention, and idempotency.Middleware over
// Executor.WithTx(). Build those yourself for what this leaves out (a
// replay cache, a shared executor, a store of your own).
//
// Errors: a schema without the idempotency line is a
// *migrations.NotMigratedError (errors.Is(err, migrations.ErrNotMigrated))
// naming the versions missing and the fix: `payonce migrate up`, or
// migrations.MigrateLines(ctx, pool, migrations.LineIdempotency) at
// start-up. A bad route table, configuration or option is an
// *idempotency.InvalidError naming the field (MiddlewareConfig.Routes[1].Pattern,
// MiddlewareOptions.Actions["createOrder"], ...).
func Middleware(pool *pgxpool.Pool, cfg idempotency.MiddlewareConfig, opts *MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if pool == nil {
		return nil, &idempotency.InvalidError{Field: "pool", Reason: "nil: pass the *pgxpool.Pool of the database migrated with package migrations"}
	}
	var o MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	var base idempotency.Config
	if o.Executor != nil {
		base = *o.Executor
	}
	// The route table first: it is checked without the database.
	if _, err := idempotency.Middleware(noDoer{}, cfg); err != nil {
		return nil, err
	}
	if base.ReplayCache != nil {
		return nil, &idempotency.InvalidError{Field: "MiddlewareOptions.Executor.ReplayCache",
			Reason: "not available in the one-call middleware, which has no Close to stop the cache's listener: build the executor with pgstore.NewExecutor, pass it to idempotency.Middleware, and Close it at shutdown"}
	}
	// The route table's actions, in order, for the options' check.
	var actions []string
	for _, rt := range cfg.Routes {
		if !slices.Contains(actions, rt.Action) {
			actions = append(actions, rt.Action)
		}
	}
	names := make([]string, 0, len(o.Actions))
	for name := range o.Actions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !slices.Contains(actions, name) {
			return nil, &idempotency.InvalidError{Field: fmt.Sprintf("MiddlewareOptions.Actions[%q]", name),
				Reason: fmt.Sprintf("no route has this Action (the routes' actions: %s): fix the name, or drop the entry", strings.Join(quoteAll(actions), ", "))}
		}
	}
	store, err := New(pool, o.Store)
	if err != nil {
		return nil, fmt.Errorf("pgstore.Middleware: %w", err)
	}
	// One executor per distinct (lease, retention), shared by the actions
	// that have it.
	type policyKey struct{ lock, retention time.Duration }
	execs := map[policyKey]idempotency.Doer{}
	byAction := map[string]idempotency.Doer{}
	for _, action := range actions {
		c := base
		field := "MiddlewareOptions.Executor"
		if p, ok := o.Actions[action]; ok {
			field = fmt.Sprintf("MiddlewareOptions.Actions[%q]", action)
			if p.LockTimeout != 0 {
				c.LockTimeout = p.LockTimeout
			}
			if p.Retention != 0 {
				c.Retention = p.Retention
			}
		}
		k := policyKey{c.LockTimeout, c.Retention}
		if d, ok := execs[k]; ok {
			byAction[action] = d
			continue
		}
		exec, err := NewExecutor(store, &c)
		if err != nil {
			var ie *idempotency.InvalidError
			if errors.As(err, &ie) {
				return nil, &idempotency.InvalidError{Field: field, Reason: ie.Field + ": " + ie.Reason}
			}
			return nil, err
		}
		var d idempotency.Doer = exec
		if !o.NoTx {
			d = exec.WithTx()
		}
		execs[k], byAction[action] = d, d
	}
	var doer idempotency.Doer = actionDoer(byAction)
	if len(execs) == 1 {
		doer = byAction[actions[0]]
	}
	return idempotency.Middleware(doer, cfg)
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// actionDoer sends each request to its route action's executor. The
// middleware's keys are the route's Action, "_", and the client's key; an
// Action has no "_" (idempotency.ValidateAction).
type actionDoer map[string]idempotency.Doer

func (d actionDoer) Do(ctx context.Context, req idempotency.Request, action idempotency.Action) (idempotency.Result, error) {
	name, _, _ := strings.Cut(req.Key, "_")
	exec, ok := d[name]
	if !ok {
		return idempotency.Result{}, fmt.Errorf("pgstore.Middleware: no executor for the action of key %s", idempotency.ShortHash(req.Key))
	}
	return exec.Do(ctx, req, action)
}

// noDoer stands in for the executors while the route table is checked.
type noDoer struct{}

func (noDoer) Do(context.Context, idempotency.Request, idempotency.Action) (idempotency.Result, error) {
	return idempotency.Result{}, errors.New("pgstore.Middleware: not built")
}
