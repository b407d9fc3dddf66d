package design

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/payonce/payonce/migrations"
)

var now = time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)

func checkoutDoc(t *testing.T, f Format) (*Document, []byte) {
	t.Helper()
	a, err := LoadAnswers("testdata/checkout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a.Format = string(f)
	d, err := Build(*a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(d, out); err != nil {
		t.Fatalf("the checkout design breaks a constraint: %v", err)
	}
	return d, out
}

func TestDesignEverySectionBothFormats(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{HTML, Markdown} {
		d, out := checkoutDoc(t, f)
		s := string(out)
		for i, id := range SectionIDs {
			if !strings.Contains(s, `id="`+id+`"`) {
				t.Errorf("%s: section %s missing", f, id)
			}
			if !strings.Contains(s, d.Sections[i].Number+". "+sectionTitles[i]) {
				t.Errorf("%s: section title %q missing", f, sectionTitles[i])
			}
			if len(d.Sections[i].Blocks) == 0 {
				t.Errorf("%s: section %s empty", f, id)
			}
		}
		// Real DDL and real alert rules, tailored content.
		for _, want := range []string{
			"CREATE TABLE idempotency_store", "IdempotencyLockTimeoutsSustained", "idempotency_lock_timeouts_total",
			"{scope}_checkout_{intent}", "PayPal-Request-Id", "UUIDv5", "Idempotency-Key", "birthday bound",
			"reserve", "compensation", "Generated 2026-12-04 02:00 UTC", "45d",
			"Constraints checked on this document", "C7",
		} {
			if f == HTML {
				want = html.EscapeString(want)
			}
			if !strings.Contains(s, want) {
				t.Errorf("%s: %q missing", f, want)
			}
		}
	}
	_, md := checkoutDoc(t, Markdown)
	if !bytes.Contains(md, []byte(strings.TrimSpace(strings.SplitN(migrations.SQL(), "\n", 2)[0]))) {
		t.Error("markdown: the DDL is not the migrations package's")
	}
	if !bytes.Contains(md, []byte("- [1. Action analysis](#s1-actions)")) {
		t.Error("markdown: no linked table of contents")
	}
}

// TestDesignHTMLSelfContained parses the HTML: nothing loads from outside,
// every TOC link resolves to an element.
func TestDesignHTMLSelfContained(t *testing.T) {
	t.Parallel()
	_, out := checkoutDoc(t, HTML)
	doc, err := html.Parse(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var hrefs []string
	var styles []string
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				v := strings.TrimSpace(strings.ToLower(a.Val))
				switch a.Key {
				case "id":
					ids[a.Val] = true
				case "src", "href", "srcset", "action", "poster", "data":
					if strings.HasPrefix(v, "http:") || strings.HasPrefix(v, "https:") || strings.HasPrefix(v, "//") {
						t.Errorf("<%s %s=%q> loads from outside", n.Data, a.Key, a.Val)
					}
					if a.Key == "href" {
						hrefs = append(hrefs, a.Val)
					}
				case "style":
					styles = append(styles, a.Val)
				}
			}
			if n.Data == "script" || n.Data == "img" || n.Data == "iframe" || (n.Data == "link") {
				t.Errorf("<%s> in a self-contained document", n.Data)
			}
			if n.Data == "style" && n.FirstChild != nil {
				styles = append(styles, n.FirstChild.Data)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for _, s := range styles {
		if strings.Contains(s, "@import") || strings.Contains(s, "url(") {
			t.Errorf("style loads something: %q", s)
		}
	}
	if len(hrefs) < len(SectionIDs) {
		t.Fatalf("table of contents has %d links, want %d", len(hrefs), len(SectionIDs))
	}
	for _, h := range hrefs {
		if !strings.HasPrefix(h, "#") || !ids[h[1:]] {
			t.Errorf("link %q resolves to nothing", h)
		}
	}
}

// TestDesignCheckRefusesBrokenDoc breaks each constraint in turn.
func TestDesignCheckRefusesBrokenDoc(t *testing.T) {
	t.Parallel()
	cases := []struct {
		c      string
		break_ func(d *Document)
	}{
		{C1, func(d *Document) { d.Actions[0].KeyFormat = "{scope}_checkout_{intent}_{timestamp}" }},
		{C1, func(d *Document) { d.Actions[1].KeyFormat = "checkout_{intent}" }},
		{C2, func(d *Document) { d.Actions[0].LockTimeout = time.Second }},
		{C2, func(d *Document) { d.Actions[0].LockTimeout = 60 * 24 * time.Hour }},
		{C3, func(d *Document) { d.Retention = 24 * time.Hour }},
		{C4, func(d *Document) { d.Actions[1].Refs[0].Value = "uuid.New()" }},
		{C4, func(d *Document) { d.Actions[1].Refs = nil }},
		{C5, func(d *Document) { d.Actions[0].Fields = append(d.Actions[0].Fields, "created_at") }},
		{C5, func(d *Document) { d.Actions[0].Excluded = []string{"headers"} }},
		{C6, func(d *Document) { d.Actions[0].Steps[1].Compensation = "" }},
		{C7, func(d *Document) { d.Sections = d.Sections[:11] }},
		{C7, func(d *Document) { d.Sections[13].Blocks = nil }},
	}
	for _, tc := range cases {
		d, out := checkoutDoc(t, HTML)
		tc.break_(d)
		err := Check(d, out)
		if err == nil {
			t.Errorf("%s: the broken document passed", tc.c)
			continue
		}
		var v *Violation
		if !errors.As(err, &v) || !slices.Contains(Violated(err), tc.c) {
			t.Errorf("want %s violated, got %v", tc.c, err)
		}
		if !strings.Contains(err.Error(), "constraint "+tc.c) {
			t.Errorf("error does not name %s: %v", tc.c, err)
		}
	}
	// C7 on the rendering: a section dropped from the output.
	d, out := checkoutDoc(t, HTML)
	out = bytes.Replace(out, []byte(`id="d2-ddl"`), []byte(`id="gone"`), 1)
	if !slices.Contains(Violated(Check(d, out)), C7) {
		t.Error("C7: a rendering without the DDL section passed")
	}
}

func TestDesignScanExamples(t *testing.T) {
	t.Parallel()
	r, err := Scan("../../../../examples")
	if err != nil {
		t.Fatal(err)
	}
	has := func(l []Finding, file, detail string) bool {
		for _, f := range l {
			if strings.Contains(f.Pos, file) && strings.Contains(f.Detail, detail) {
				return true
			}
		}
		return false
	}
	for _, route := range []string{"POST /checkout", "POST /charges", "POST /refunds"} {
		if !has(r.Routes, "checkout/service/service.go:", route) {
			t.Errorf("route %s of examples/checkout/service not found:\n%s", route, r.Report())
		}
	}
	for _, call := range []string{"Charge", "Refund"} {
		if !has(r.Payments, "checkout/service/", "payments.Client."+call) {
			t.Errorf("payment call %s of the checkout not found:\n%s", call, r.Report())
		}
	}
	if !has(r.Consumers, "worker/", "River worker") {
		t.Errorf("River workers of examples/worker not found:\n%s", r.Report())
	}
	var a Answers
	answered := r.Apply(&a)
	if !answered[1] || !answered[2] || a.Stack.Language != "Go" || a.Stack.Database != "PostgreSQL" {
		t.Errorf("scan did not answer actions and stack: %+v %v", a.Stack, answered)
	}
}

func TestDesignScanAntiPatterns(t *testing.T) {
	t.Parallel()
	r, err := Scan("testdata/scanmod")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"main.go:28":    APInsertNoGuard,
		"main.go:30":    APNoKey,
		"main.go:36":    APRandomRef,
		"main.go:37":    APRandomRef,
		"main.go:39":    APLockNoTimeout,
		"routers.go:32": APNoKey,
	}
	got := map[string]string{}
	for _, f := range r.AntiPatterns {
		got[strings.TrimPrefix(f.Pos, "testdata/scanmod/")] = f.Kind
	}
	for pos, kind := range want {
		if got[pos] != kind {
			t.Errorf("%s: want %q, got %q\n%s", pos, kind, got[pos], r.Report())
		}
	}
	if len(r.AntiPatterns) != len(want) {
		t.Errorf("want %d anti-patterns, got %d:\n%s", len(want), len(r.AntiPatterns), r.Report())
	}
	if len(r.Routes) != 5 || len(r.Crons) != 1 || len(r.Payments) != 2 || len(r.Consumers) != 2 ||
		!slices.Contains(r.Providers, "stripe") || !slices.Contains(r.Providers, "paypal") {
		t.Errorf("routes, consumers, cron job or provider calls not found:\n%s", r.Report())
	}
	for _, want := range []string{"routers.go:17: route: POST /refunds", "routers.go:19: route: PUT /carts/:id", "routers.go:21: route: DELETE /sessions/:id",
		"routers.go:22: consumer: NATS QueueSubscribe", "routers.go:27: consumer: River worker EmailWorker.Work", "main.go:23: cron job: cron @hourly"} {
		if !strings.Contains(r.Report(), want) {
			t.Errorf("scan report lacks %q:\n%s", want, r.Report())
		}
	}
	// The findings reach section 9.
	var a Answers
	r.Apply(&a)
	d, err := Build(a, r.AntiPatterns, now)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := Render(d)
	if !bytes.Contains(out, []byte("testdata/scanmod/main.go:36")) {
		t.Error("section 9 does not list the scan's findings")
	}
}

// TestDesignAskOnceMore: an unanswered question is asked once more with
// examples, never a third time; 1-2 unanswered give an agnostic design.
func TestDesignAskOnceMore(t *testing.T) {
	t.Parallel()
	in := strings.NewReader(strings.Join([]string{
		"",     // format: default HTML
		"", "", // Q1 twice unanswered
		"", "", // Q2 twice unanswered
		"", "client retries, queue redelivery", // Q3 on the second asking
		"stripe", "multi-instance, 50k/day", "", "", "synchronous",
	}, "\n") + "\n")
	var out bytes.Buffer
	var a Answers
	notes, err := NewAsker(in, &out).Interview(&a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "Once more"); n != 4 {
		t.Errorf("asked once more %d times, want 4 (Q1, Q2, Q3, Q6):\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), Questions[1].Text); n != 1 {
		t.Errorf("question 1 shown %d times", n)
	}
	if len(notes) != 3 || !strings.Contains(notes[0], "agnostic") {
		t.Errorf("notes: %q", notes)
	}
	if a.Format != "" || len(a.RetrySources) != 2 || a.VolumePerDay != 50000 || a.Retention != "" || a.DetectionLatency != "synchronous" {
		t.Errorf("answers: %+v", a)
	}
	d, err := Build(a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	out2, _ := Render(d)
	if err := Check(d, out2); err != nil {
		t.Fatal(err)
	}
	if !d.Agnostic || !bytes.Contains(out2, []byte("needs adaptation")) || !bytes.Contains(out2, []byte("Retention not stated")) {
		t.Error("an agnostic design with stated assumptions was expected")
	}
}

func TestDesignRetentionCoversHorizons(t *testing.T) {
	t.Parallel()
	a := Answers{Stack: Stack{Language: "Python", Framework: "Django"}, Actions: []Action{{Name: "refund", Provider: "paypal"}},
		Providers: []string{"paypal"}, Retention: "24h", RetrySources: []string{"client_retries"}}
	d, err := Build(a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if d.Retention != 45*24*time.Hour || !strings.Contains(d.RetentionReason, "raised") {
		t.Errorf("retention %s (%s): want raised to PayPal's 45 days", d.Retention, d.RetentionReason)
	}
	out, _ := Render(d)
	if err := Check(d, out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("Adaptation needed")) {
		t.Error("a Python stack needs the adaptation note")
	}
}

// TestDesignMonitoringFromRules: the instruments, their types and the
// thresholds come from deploy/monitoring's rule files.
func TestDesignMonitoringFromRules(t *testing.T) {
	t.Parallel()
	metrics, alerts, err := Monitoring()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, m := range metrics {
		types[m.Instrument] = m.Type
	}
	for inst, typ := range map[string]string{
		"idempotency.duplicates_blocked": "counter", "idempotency.store_size": "gauge",
		"idempotency.processing_duration_ms": "histogram", "idempotency.lock_timeouts": "counter",
		"payments.unknown_outcomes": "counter", "saga.stuck": "counter",
	} {
		if types[inst] != typ {
			t.Errorf("%s: type %q, want %q", inst, types[inst], typ)
		}
	}
	for _, a := range alerts {
		if a.Name == "IdempotencyLockTimeoutsSustained" && threshold(a) != "> 0 for 15m" {
			t.Errorf("threshold of %s: %q", a.Name, threshold(a))
		}
	}
}

func TestDesignParseFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Format{"": HTML, "default": HTML, " HTML ": HTML, "markdown": Markdown, "md": Markdown} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseFormat("pdf"); err == nil {
		t.Error("pdf accepted")
	}
}
