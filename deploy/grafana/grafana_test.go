package grafana_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/payonce/payonce/deploy/grafana"
	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/cronslot"
	"github.com/payonce/payonce/idempotency/inbox"
	"github.com/payonce/payonce/idempotency/memstore"
	"github.com/payonce/payonce/idempotency/pgstore"
	"github.com/payonce/payonce/payments"
	"github.com/payonce/payonce/payments/provider"
	"github.com/payonce/payonce/pgtest"
	"github.com/payonce/payonce/providers/stripe"
	"github.com/payonce/payonce/reconcile"
	"github.com/payonce/payonce/saga"
)

// meter records the name and kind of every instrument payonce creates.
type meter struct {
	noop.Meter
	kinds map[string]string // instrument name -> counter, gauge or histogram
}

func (m *meter) add(name, kind string) { m.kinds[name] = kind }

func (m *meter) Int64Counter(n string, o ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.add(n, "counter")
	return m.Meter.Int64Counter(n, o...)
}
func (m *meter) Float64Counter(n string, o ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	m.add(n, "counter")
	return m.Meter.Float64Counter(n, o...)
}
func (m *meter) Int64ObservableCounter(n string, o ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	m.add(n, "counter")
	return m.Meter.Int64ObservableCounter(n, o...)
}
func (m *meter) Float64ObservableCounter(n string, o ...metric.Float64ObservableCounterOption) (metric.Float64ObservableCounter, error) {
	m.add(n, "counter")
	return m.Meter.Float64ObservableCounter(n, o...)
}
func (m *meter) Int64UpDownCounter(n string, o ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	m.add(n, "gauge")
	return m.Meter.Int64UpDownCounter(n, o...)
}
func (m *meter) Float64UpDownCounter(n string, o ...metric.Float64UpDownCounterOption) (metric.Float64UpDownCounter, error) {
	m.add(n, "gauge")
	return m.Meter.Float64UpDownCounter(n, o...)
}
func (m *meter) Int64ObservableUpDownCounter(n string, o ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	m.add(n, "gauge")
	return m.Meter.Int64ObservableUpDownCounter(n, o...)
}
func (m *meter) Float64ObservableUpDownCounter(n string, o ...metric.Float64ObservableUpDownCounterOption) (metric.Float64ObservableUpDownCounter, error) {
	m.add(n, "gauge")
	return m.Meter.Float64ObservableUpDownCounter(n, o...)
}
func (m *meter) Int64Gauge(n string, o ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	m.add(n, "gauge")
	return m.Meter.Int64Gauge(n, o...)
}
func (m *meter) Float64Gauge(n string, o ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	m.add(n, "gauge")
	return m.Meter.Float64Gauge(n, o...)
}
func (m *meter) Int64ObservableGauge(n string, o ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	m.add(n, "gauge")
	return m.Meter.Int64ObservableGauge(n, o...)
}
func (m *meter) Float64ObservableGauge(n string, o ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	m.add(n, "gauge")
	return m.Meter.Float64ObservableGauge(n, o...)
}
func (m *meter) Int64Histogram(n string, o ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	m.add(n, "histogram")
	return m.Meter.Int64Histogram(n, o...)
}
func (m *meter) Float64Histogram(n string, o ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	m.add(n, "histogram")
	return m.Meter.Float64Histogram(n, o...)
}

type provName struct {
	noop.MeterProvider
	m *meter
}

func (p provName) Meter(string, ...metric.MeterOption) metric.Meter { return p.m }

// series returns the Prometheus series names of every instrument
// payonce's packages create, as the OpenTelemetry Prometheus exporter
// writes them: dots become underscores, counters get _total, histograms
// _bucket, _sum and _count.
func series(t *testing.T) map[string]bool {
	t.Helper()
	m := &meter{kinds: map[string]string{}}
	mp := provName{m: m}
	pool := pgtest.Pool(t)
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stripe.New(&stripe.Config{SecretKey: "sk_test_dashboard", BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, build := range []func() error{
		func() error {
			_, err := idempotency.New(memstore.New(nil), &idempotency.Config{MeterProvider: mp})
			return err
		},
		func() error {
			_, err := idempotency.NewPruner(memstore.New(nil), &idempotency.PrunerConfig{MeterProvider: mp})
			return err
		},
		func() error {
			exec, err := idempotency.New(memstore.New(nil), nil)
			if err != nil {
				return err
			}
			_, err = idempotency.Middleware(exec, idempotency.MiddlewareConfig{MeterProvider: mp,
				Scope:  func(*http.Request) string { return "u" },
				Routes: []idempotency.Route{{Pattern: "POST /orders", Action: "createOrder"}}})
			return err
		},
		func() error {
			_, err := payments.New(pool, []provider.Provider{st}, &payments.Config{MeterProvider: mp})
			return err
		},
		func() error { _, err := reconcile.New(pool, nil, &reconcile.Config{MeterProvider: mp}); return err },
		func() error { _, err := saga.New(pool, &saga.Config{MeterProvider: mp}); return err },
		func() error { _, err := inbox.New(store, &inbox.Config{MeterProvider: mp}); return err },
		func() error { _, err := cronslot.New(store, &cronslot.Config{MeterProvider: mp}); return err },
	} {
		if err := build(); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]bool{}
	for name, kind := range m.kinds {
		base := strings.ReplaceAll(name, ".", "_")
		switch kind {
		case "counter":
			out[base+"_total"] = true
		case "histogram":
			out[base+"_bucket"], out[base+"_sum"], out[base+"_count"] = true, true, true
		default:
			out[base] = true
		}
	}
	if len(m.kinds) < 20 {
		t.Fatalf("only %d instruments recorded: %v", len(m.kinds), m.kinds)
	}
	return out
}

type gridPos struct{ H, W, X, Y int }

type target struct {
	RefID        string          `json:"refId"`
	Expr         string          `json:"expr"`
	LegendFormat string          `json:"legendFormat"`
	Datasource   json.RawMessage `json:"datasource"`
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	GridPos     *gridPos        `json:"gridPos"`
	Datasource  json.RawMessage `json:"datasource"`
	Targets     []target        `json:"targets"`
	FieldConfig *struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

// metricRef finds the names of payonce's series in a PromQL expression.
var metricRef = regexp.MustCompile(`\b(?:idempotency|payments|reconcile|saga|inbox|cronslot)_[a-z0-9_]+\b`)

func TestDashboard(t *testing.T) {
	known := series(t)
	dec := json.NewDecoder(bytes.NewReader(grafana.Dashboard))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("payonce.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("dashboard header: title %q uid %q schemaVersion %d, %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["job"] != "query" {
		t.Fatalf("variables %v: want a datasource variable and a job query variable", vars)
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	type cell struct{ x, y int }
	taken := map[cell]int{}
	for _, p := range d.Panels {
		where := p.Title
		switch {
		case ids[p.ID] || p.ID <= 0:
			t.Errorf("%s: id %d missing or not unique", where, p.ID)
		case p.Title == "":
			t.Errorf("panel %d has no title", p.ID)
		case p.GridPos == nil || p.GridPos.W < 1 || p.GridPos.H < 1 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.Y < 0:
			t.Errorf("%s: gridPos %+v is not on Grafana's 24-column grid", where, p.GridPos)
		}
		ids[p.ID] = true
		if p.GridPos != nil {
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
					if other, ok := taken[cell{x, y}]; ok {
						t.Errorf("%s overlaps panel %d at (%d, %d)", where, other, x, y)
					}
					taken[cell{x, y}] = p.ID
				}
			}
		}
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				t.Errorf("row %s has queries", where)
			}
			continue
		}
		if p.Type != "timeseries" && p.Type != "stat" && p.Type != "gauge" && p.Type != "table" {
			t.Errorf("%s: panel type %q", where, p.Type)
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("%s: datasource %s is not the dashboard's variable", where, p.Datasource)
		}
		if p.FieldConfig == nil || p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("%s: no unit", where)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", where)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] {
				t.Errorf("%s: refId %q missing or repeated", where, q.RefID)
			}
			refs[q.RefID] = true
			if strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") || strings.Count(q.Expr, "{") != strings.Count(q.Expr, "}") {
				t.Errorf("%s: unbalanced query %q", where, q.Expr)
			}
			if !strings.Contains(q.Expr, `job=~"$job"`) {
				t.Errorf("%s: query %q ignores the job variable", where, q.Expr)
			}
			names := metricRef.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: query %q names no payonce metric", where, q.Expr)
			}
			for _, n := range names {
				if !known[n] {
					t.Errorf("%s: query names %s, which payonce does not export", where, n)
				}
				used[n] = true
			}
		}
	}
	// Every instrument is on the dashboard (a histogram through its
	// buckets).
	var missing []string
	for n := range known {
		if strings.HasSuffix(n, "_sum") || strings.HasSuffix(n, "_count") {
			continue
		}
		if !used[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics on no panel: %v", missing)
	}
}
