package reconcile

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/payonce/payonce/money"
)

// HTMLReport is what [WriteHTML] renders: runs, their divergence items,
// and when it was made.
type HTMLReport struct {
	Runs      []Report
	Items     []Item
	Generated time.Time
}

// WriteHTML writes r as one self-contained HTML page: inline CSS and SVG,
// no script, no external asset or link that loads anything. It shows the
// runs, the items per kind and per provider, the balance drift per
// currency with a small chart, and every item.
func WriteHTML(w io.Writer, r HTMLReport) error {
	if r.Generated.IsZero() {
		r.Generated = time.Now()
	}
	return htmlReport.Execute(w, buildView(r))
}

type count struct {
	Name string
	N    int
}

// driftPoint is one balance drift item: the provider's net minus the
// ledger's, in the currency's units.
type driftPoint struct {
	At       time.Time
	Provider string
	Drift    string
	value    float64
	// X, Y, H place its bar in the chart.
	X, Y, H float64
	Neg     bool
}

type driftChart struct {
	Currency      string
	Points        []driftPoint
	Width, Height float64
	Zero          float64
	Max           string
}

type view struct {
	HTMLReport
	Kinds, Providers []count
	Drift            []driftChart
	// PerRun counts the items of each run (a run listed from the store
	// carries none of its own).
	PerRun          map[int64]int
	Examined        int
	Repaired        int
	FailedWithProof int
	NeedsReview     int
}

var amountsRE = regexp.MustCompile(`charged (-?[0-9.]+), refunded (-?[0-9.]+)`)

// net reads "charged X, refunded Y" (a drift item's states) as X - Y.
func net(state string, c money.Currency) (money.Money, bool) {
	m := amountsRE.FindStringSubmatch(state)
	if m == nil {
		return money.Money{}, false
	}
	charged, err1 := money.Parse(m[1], c)
	refunded, err2 := money.Parse(m[2], c)
	if err1 != nil || err2 != nil {
		return money.Money{}, false
	}
	d, err := charged.Sub(refunded)
	return d, err == nil
}

func buildView(r HTMLReport) view {
	v := view{HTMLReport: r}
	kinds, provs := map[string]int{}, map[string]int{}
	v.PerRun = map[int64]int{}
	for _, x := range r.Items {
		v.PerRun[x.RunID]++
		kinds[string(x.Kind)]++
		if x.Provider != "" {
			provs[x.Provider]++
		}
	}
	v.Kinds, v.Providers = counts(kinds), counts(provs)
	for _, run := range r.Runs {
		v.Examined += run.Examined
		v.Repaired += run.Repaired
		v.FailedWithProof += run.FailedWithProof
		v.NeedsReview += run.NeedsReview
	}
	byCurrency := map[string][]driftPoint{}
	for _, x := range r.Items {
		if x.Kind != KindBalanceDrift || x.Currency == "" {
			continue
		}
		c := money.Currency(x.Currency)
		theirs, ok1 := net(x.ProviderState, c)
		ours, ok2 := net(x.LocalState, c)
		if !ok1 || !ok2 {
			continue
		}
		d, err := theirs.Sub(ours)
		if err != nil {
			continue
		}
		f := d.Amount().InexactFloat64() // for the chart only; the table shows the exact amount
		byCurrency[x.Currency] = append(byCurrency[x.Currency], driftPoint{At: x.At, Provider: x.Provider, Drift: d.AmountString(), value: f})
	}
	for cur, pts := range byCurrency {
		slices.SortFunc(pts, func(a, b driftPoint) int { return a.At.Compare(b.At) })
		v.Drift = append(v.Drift, chart(cur, pts))
	}
	slices.SortFunc(v.Drift, func(a, b driftChart) int { return cmp.Compare(a.Currency, b.Currency) })
	return v
}

func counts(m map[string]int) []count {
	var out []count
	for k, n := range m {
		out = append(out, count{k, n})
	}
	slices.SortFunc(out, func(a, b count) int {
		if a.N != b.N {
			return b.N - a.N
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// chart lays the drift of one currency out as bars around a zero line.
func chart(cur string, pts []driftPoint) driftChart {
	const width, height, bar, gap = 480.0, 120.0, 14.0, 6.0
	c := driftChart{Currency: cur, Width: max(width, float64(len(pts))*(bar+gap)+gap), Height: height, Points: pts}
	top := 0.0
	for _, p := range pts {
		top = max(top, abs(p.value))
	}
	if top == 0 {
		top = 1
	}
	c.Max = fmt.Sprintf("%g", top)
	c.Zero = height / 2
	for i := range c.Points {
		p := &c.Points[i]
		p.H = abs(p.value) / top * (height/2 - 4)
		p.X = gap + float64(i)*(bar+gap)
		p.Neg = p.value < 0
		if p.Neg {
			p.Y = c.Zero
		} else {
			p.Y = c.Zero - p.H
		}
	}
	return c
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{
	"time": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"dur": func(d time.Duration) string {
		return d.Round(time.Second).String()
	},
	"anchor": func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, strings.ToLower(s))
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>payonce divergence report</title>
<style>
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px 32px 48px}
h1{font-size:26px;margin:8px 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:1px solid #d9dde3;padding-bottom:4px}
nav ul{list-style:none;padding:0;display:flex;gap:16px;flex-wrap:wrap}nav a{color:#2456a6}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13.5px}
th,td{border:1px solid #d9dde3;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#fff;border:1px solid #d9dde3;border-radius:6px;padding:10px 16px;min-width:130px}
.card b{display:block;font-size:22px}.muted{color:#5d6675}.err{color:#a3261b}
svg{background:#fff;border:1px solid #d9dde3}.pos{fill:#c0392b}.neg{fill:#2471a3}
footer{margin-top:40px;color:#5d6675;font-size:12.5px}
</style>
</head>
<body><main>
<h1>payonce divergence report</h1>
<p class="muted">{{len .Runs}} reconciler runs, {{len .Items}} divergence items.</p>
<nav class="toc"><ul>
<li><a href="#summary">Summary</a></li><li><a href="#runs">Runs</a></li><li><a href="#kinds">By kind</a></li>
<li><a href="#providers">By provider</a></li><li><a href="#drift">Balance drift</a></li><li><a href="#items">Items</a></li>
</ul></nav>

<h2 id="summary">Summary</h2>
<div class="cards">
<div class="card"><b>{{.Examined}}</b>intents examined</div>
<div class="card"><b>{{.Repaired}}</b>repaired</div>
<div class="card"><b>{{.FailedWithProof}}</b>failed with proof</div>
<div class="card"><b>{{.NeedsReview}}</b>flagged for review</div>
<div class="card"><b>{{len .Items}}</b>divergences</div>
</div>

<h2 id="runs">Runs</h2>
{{if .Runs}}<table><tr><th>run</th><th>started</th><th>instance</th><th>examined</th><th>repaired</th><th>failed with proof</th><th>review</th><th>rescheduled</th><th>divergences</th><th>error</th></tr>
{{range .Runs}}<tr><td class="n">{{.RunID}}</td><td>{{time .Started}}</td><td>{{.Instance}}</td><td class="n">{{.Examined}}</td><td class="n">{{.Repaired}}</td><td class="n">{{.FailedWithProof}}</td><td class="n">{{.NeedsReview}}</td><td class="n">{{.Rescheduled}}</td><td class="n">{{index $.PerRun .RunID}}</td><td class="err">{{.Error}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No run recorded.</p>{{end}}

<h2 id="kinds">By kind</h2>
{{if .Kinds}}<table><tr><th>kind</th><th>items</th></tr>
{{range .Kinds}}<tr><td><a href="#kind-{{anchor .Name}}">{{.Name}}</a></td><td class="n">{{.N}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No divergence.</p>{{end}}

<h2 id="providers">By provider</h2>
{{if .Providers}}<table><tr><th>provider</th><th>items</th></tr>
{{range .Providers}}<tr><td>{{.Name}}</td><td class="n">{{.N}}</td></tr>
{{end}}</table>{{else}}<p class="muted">No divergence.</p>{{end}}

<h2 id="drift">Balance drift</h2>
<p class="muted">Per currency: the money each provider moved (charged minus refunded) minus the ledger's, for each balance check that found a difference. Bars above the line: the provider holds more than the books.</p>
{{range .Drift}}<h3>{{.Currency}}</h3>
<svg role="img" aria-label="balance drift in {{.Currency}}" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}">
<line x1="0" y1="{{.Zero}}" x2="{{.Width}}" y2="{{.Zero}}" stroke="#5d6675" stroke-width="1"/>
{{range .Points}}<rect class="{{if .Neg}}neg{{else}}pos{{end}}" x="{{.X}}" y="{{.Y}}" width="14" height="{{.H}}"><title>{{time .At}} {{.Provider}}: {{.Drift}}</title></rect>
{{end}}<text x="{{.Width}}" dx="-4" y="12" text-anchor="end" font-size="11" fill="#5d6675">scale ±{{.Max}} {{.Currency}}</text>
</svg>
<table><tr><th>checked</th><th>provider</th><th>drift</th></tr>
{{$c := .Currency}}{{range .Points}}<tr><td>{{time .At}}</td><td>{{.Provider}}</td><td class="n">{{.Drift}} {{$c}}</td></tr>
{{end}}</table>
{{else}}<p class="muted">No balance drift found.</p>{{end}}

<h2 id="items">Items</h2>
{{range .Kinds}}{{$k := .Name}}<h3 id="kind-{{anchor $k}}">{{$k}}</h3>
<table><tr><th>run</th><th>at</th><th>provider</th><th>intent</th><th>local</th><th>provider says</th><th>action</th><th>detail</th><th>age</th></tr>
{{range $.Items}}{{if eq (print .Kind) $k}}<tr><td class="n">{{.RunID}}</td><td>{{time .At}}</td><td>{{.Provider}}</td><td>{{.IntentKey}}</td><td>{{.LocalState}}</td><td>{{.ProviderState}}</td><td>{{.Action}}</td><td>{{.Detail}}</td><td>{{dur .Age}}</td></tr>
{{end}}{{end}}</table>
{{end}}
<footer>Generated by payonce report --format html at {{time .Generated}}.</footer>
</main></body></html>
`))
