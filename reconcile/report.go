package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payonce/payonce/payments"
)

// Report is one run's outcome: counts and one Item per divergence found
// or repair made.
type Report struct {
	RunID           int64
	Instance        string
	Started         time.Time
	Finished        time.Time
	Examined        int
	Repaired        int
	FailedWithProof int
	NeedsReview     int
	Rescheduled     int
	Items           []Item
	Error           string
}

// Item is one row of a report: what payonce said, what the provider
// said, what was done.
type Item struct {
	Kind          Kind                `json:"kind"`
	Provider      string              `json:"provider"`
	Scope         string              `json:"scope"`
	IntentKey     string              `json:"intent_key"`
	IntentKind    payments.IntentKind `json:"intent_kind"`
	Currency      string              `json:"currency"`
	LocalState    string              `json:"local_state"`
	ProviderState string              `json:"provider_state"`
	Action        Action              `json:"action"`
	Detail        string              `json:"detail"`
	// Age is how long the intent had been open; JSON gives it in seconds
	// (age_seconds), as the CSV does.
	Age   time.Duration `json:"age_seconds"`
	At    time.Time     `json:"at"`
	RunID int64         `json:"run_id"`
}

// MarshalJSON writes Age as seconds (age_seconds), not nanoseconds.
func (x Item) MarshalJSON() ([]byte, error) {
	type plain Item
	return json.Marshal(struct {
		plain
		Age float64 `json:"age_seconds"`
	}{plain(x), x.Age.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (x *Item) UnmarshalJSON(b []byte) error {
	type plain Item
	var v struct {
		plain
		Age float64 `json:"age_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*x = Item(v.plain)
	x.Age = time.Duration(v.Age * float64(time.Second))
	return nil
}

func (r *Report) add(x Item) {
	x.RunID = r.RunID
	if x.At.IsZero() {
		x.At = time.Now()
	}
	r.Items = append(r.Items, x)
}

// Filter selects past report items.
type Filter struct {
	// RunID selects one run; 0 any.
	RunID int64
	// Kind selects by exact value; empty any.
	Kind Kind
	// Provider selects by exact value; empty any.
	Provider string
	// MinAge keeps items whose intent was at least this old.
	MinAge time.Duration
	// Since keeps items recorded after it; zero: any.
	Since time.Time
	// Limit bounds the rows; 0 means 1000.
	Limit int
}

// Runs lists the latest runs, newest first.
func Runs(ctx context.Context, pool *pgxpool.Pool, limit int) ([]Report, error) {
	if limit <= 0 {
		limit = 20
	}
	rows, err := pool.Query(ctx, runsSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("reconcile: runs: %w", err)
	}
	defer rows.Close()
	var out []Report
	for rows.Next() {
		var r Report
		if err := rows.Scan(&r.RunID, &r.Instance, &r.Started, &r.Finished, &r.Examined, &r.Repaired,
			&r.FailedWithProof, &r.NeedsReview, &r.Rescheduled, &r.Error); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Items lists stored report items, newest first.
func Items(ctx context.Context, pool *pgxpool.Pool, f Filter) ([]Item, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.RunID != 0 {
		add("run_id = $%d", f.RunID)
	}
	if f.Kind != "" {
		add("kind = $%d", f.Kind)
	}
	if f.Provider != "" {
		add("provider = $%d", f.Provider)
	}
	if f.MinAge > 0 {
		add("age >= $%d::interval", f.MinAge)
	}
	if !f.Since.IsZero() {
		add("created_at >= $%d", f.Since)
	}
	q := itemsSQL
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit)
	q += fmt.Sprintf(" ORDER BY id DESC LIMIT $%d", len(args))
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("reconcile: items: %w", err)
	}
	defer rows.Close()
	var out []Item
	for rows.Next() {
		var x Item
		if err := rows.Scan(&x.RunID, &x.Kind, &x.Provider, &x.Scope, &x.IntentKey, &x.IntentKind, &x.Currency,
			&x.LocalState, &x.ProviderState, &x.Action, &x.Detail, &x.Age, &x.At); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, rows.Err()
}
