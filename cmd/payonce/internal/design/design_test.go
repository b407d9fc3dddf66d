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
		{C1, func(d *Document) { d.Actions[0].KeySource = "" }},
		{C1, func(d *Document) { d.Actions[4].IdentifyingFields = nil }},
		{C2, func(d *Document) { d.Actions[0].Fields = append(d.Actions[0].Fields, "created_at") }},
		{C2, func(d *Document) { d.Actions[0].Excluded = []string{"headers"} }},
		{C2, func(d *Document) { d.Actions[3].Fields = nil }},
		{C3, func(d *Document) { d.Actions[0].LockTimeout = time.Second }},
		{C3, func(d *Document) { d.Actions[0].LockTimeout = d.Actions[0].DurationD + time.Second }},
		{C3, func(d *Document) { d.Actions[0].LockTimeout = 60 * 24 * time.Hour }},
		{C4, func(d *Document) { d.Retention = 24 * time.Hour }},
		{C5, func(d *Document) { d.Actions[1].Refs[0].Value = "uuid.New()" }},
		{C5, func(d *Document) { d.Actions[1].Refs = nil }},
		{C5, func(d *Document) {
			d.Actions[3].Outbound, d.Actions[3].Delivery = []string{"an email"}, "sent after commit"
		}},
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
		// params.SetIdempotencyKey(uuid.New().String()) in a retry loop
		"retry.go:17": APRandomRef,
		// p.IdempotencyKey = stripe.String(uuid.NewString())
		"retry.go:27": APRandomRef,
		// idem := uuid.NewString(), then the key
		"retry.go:33": APRandomRef,
		// token := uuid.NewString(), then params.SetIdempotencyKey(token)
		"retry.go:43": APRandomRef,
		// mu.Lock() around an INSERT
		"retry.go:51": APLocalLock,
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
	if len(r.Routes) != 5 || len(r.Crons) != 1 || len(r.Payments) != 6 || len(r.Consumers) != 2 ||
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

// TestDesignInterviewTwoAsks: the format first, then at most two asks. The
// second asks once more only what the first left critical and unanswered
// or did not understand, and the fields and p99 of the actions the first
// named; everything still unanswered is an assumption the document lists.
func TestDesignInterviewTwoAsks(t *testing.T) {
	t.Parallel()
	in := strings.NewReader(strings.Join([]string{
		// ask 1
		"",                                  // format: HTML (default)
		"POST /orders, notification worker", // Q1
		"",                                  // Q2: critical, asked once more
		"carrier pigeons",                   // Q3: not understood, asked once more
		"none",                              // Q4
		"multi-instance, 50k/day",           // Q5
		"",                                  // Q6: assumed
		"",                                  // Q7: assumed
		// ask 2
		"Python, Django, MySQL, RabbitMQ",      // Q2
		"client retries 48h, queue redelivery", // Q3
		"cart_id, amount; 20s",                 // orders
		"",                                     // notification: assumed
		// a third ask would read these
		"never", "never", "never",
	}, "\n") + "\n")
	var out bytes.Buffer
	var a Answers
	notes, err := NewAsker(in, &out).Interview(&a, nil)
	if err != nil {
		t.Fatal(err)
	}
	screen := out.String()
	if strings.Count(screen, "Ask 1 of 2") != 1 || strings.Count(screen, "Ask 2 of 2") != 1 || strings.Contains(screen, "Ask 3") {
		t.Errorf("want exactly two asks:\n%s", screen)
	}
	if i, j := strings.Index(screen, Questions[0].Text), strings.Index(screen, Questions[1].Text); i < 0 || i > j {
		t.Errorf("the format is not asked first:\n%s", screen)
	}
	if n := strings.Count(screen, Questions[1].Text); n != 1 {
		t.Errorf("question 1, answered in ask 1, shown %d times", n)
	}
	if n := strings.Count(screen, Questions[6].Text); n != 1 {
		t.Errorf("question 6, not critical, shown %d times: an empty answer is an assumption, not asked again", n)
	}
	if !strings.Contains(screen, "orders: its significant fields") || !strings.Contains(screen, "notification: its significant fields") {
		t.Errorf("ask 2 does not ask the fields and p99 of the actions named in ask 1:\n%s", screen)
	}
	if a.Stack.Database != "MySQL" || a.ClientRetryWindow != "48h" || len(a.RetrySources) != 2 || a.VolumePerDay != 50000 {
		t.Errorf("answers: %+v", a)
	}
	if len(a.Actions) != 2 || !slices.Equal(a.Actions[0].Fields, []string{"cart_id", "amount"}) || a.Actions[0].Duration != "20s" ||
		a.Actions[1].Fields != nil || a.Actions[1].Duration != "" {
		t.Fatalf("actions: %+v", a.Actions)
	}
	for _, want := range []string{"action notification: fields or p99 unanswered", "question 6 unanswered", "question 7 unanswered"} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("notes lack %q: %q", want, notes)
		}
	}

	d, err := Build(a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	rendered, _ := Render(d)
	if err := Check(d, rendered); err != nil {
		t.Fatal(err)
	}
	if d.Actions[0].LockTimeout != time.Minute || !strings.Contains(d.Actions[0].LockReason, "3x the stated p99 (20s)") {
		t.Errorf("orders: lock timeout %s (%s), want 1m from the stated 20s", d.Actions[0].LockTimeout, d.Actions[0].LockReason)
	}
	for _, want := range []string{
		"p99 of notification assumed 30s (a consumer job): not answered",
		"Significant fields of notification not answered",
		"Retention not stated",
		"Duplicate detection latency not stated",
	} {
		if !slices.ContainsFunc(d.Assumptions, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("Assumptions box lacks %q:\n%s", want, strings.Join(d.Assumptions, "\n"))
		}
	}
	if slices.ContainsFunc(d.Assumptions, func(s string) bool {
		return strings.Contains(s, "p99 of orders") || strings.Contains(s, "fields of orders")
	}) {
		t.Error("an answered p99 or field list is listed as an assumption")
	}
}

// TestDesignUnansweredFieldsNoPlaceholder: an action that is not a payment
// and whose fields were not given gets no invented field list; the
// document says how to choose them, and its Go neither fingerprints the
// whole body nor sums an empty fingerprint.
func TestDesignUnansweredFieldsNoPlaceholder(t *testing.T) {
	t.Parallel()
	a := Answers{Stack: Stack{Language: "Go", Framework: "net/http", Database: "PostgreSQL"},
		Actions: []Action{{Name: "sendNotification", Kind: "http", Trigger: "POST /notifications"},
			{Name: "charge", Kind: "http", Trigger: "POST /charges", Provider: "stripe", Duration: "3s"}},
		Providers: []string{"stripe"}}
	for _, f := range []Format{HTML, Markdown} {
		a.Format = string(f)
		d, err := Build(a, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Render(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(d, out); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		s := html.UnescapeString(string(out))
		for _, bad := range []string{"amount, currency, recipient, items", "Fields: []string{}", "business fields"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s: the document has %q", f, bad)
			}
		}
		if emptySum.MatchString(s) {
			t.Errorf("%s: the document sums an empty fingerprint", f)
		}
		for _, want := range []string{
			"Choosing the fields of sendNotification: List the request fields your handler reads",
			`String("route", r.Pattern).Sum()`,
			"Significant fields of charge assumed amount, currency, recipient, payment_method (a payment): not answered",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: the document lacks %q", f, want)
			}
		}
		if len(d.Actions[0].Fields) != 0 {
			t.Errorf("sendNotification got invented fields %q", d.Actions[0].Fields)
		}
	}
}

// TestDesignCheckRefusesUnstatedAssumption: an action without fields, or
// with an assumed p99, passes only when the Assumptions box says so.
func TestDesignCheckRefusesUnstatedAssumption(t *testing.T) {
	t.Parallel()
	build := func() (*Document, []byte) {
		a := Answers{Stack: Stack{Language: "Python", Framework: "Django", Database: "MySQL"},
			Actions: []Action{{Name: "sendNotification", Kind: "consumer"}}}
		d, err := Build(a, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := Render(d)
		if err := Check(d, out); err != nil {
			t.Fatal(err)
		}
		return d, out
	}
	drop := func(d *Document, sub string) {
		d.Assumptions = slices.DeleteFunc(d.Assumptions, func(s string) bool { return strings.Contains(s, sub) })
	}
	d, out := build()
	drop(d, "Significant fields of sendNotification")
	if !slices.Contains(Violated(Check(d, out)), C2) {
		t.Error("C2: an action without fields and no stated assumption passed")
	}
	d, out = build()
	d.Actions[0].FieldsAssumption = ""
	if !slices.Contains(Violated(Check(d, out)), C2) {
		t.Error("C2: an action without fields and no reason passed")
	}
	d, out = build()
	drop(d, "p99 of sendNotification")
	if !slices.Contains(Violated(Check(d, out)), C3) {
		t.Error("C3: a lock timeout from an unstated assumed p99 passed")
	}
	d, out = build()
	if !slices.Contains(Violated(Check(d, append(out, []byte("Fields: []string{}")...))), C2) {
		t.Error("C2: a whole-body fingerprint in the code passed")
	}
	d, out = build()
	if !slices.Contains(Violated(Check(d, append(out, []byte("idempotency.NewFingerprint().\n\tSum()")...))), C2) {
		t.Error("C2: an empty fingerprint sum in the code passed")
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

// TestDesignDecisionsFromAnswers: the retention follows the user's own
// retry sources and windows (no provider's window for a team without
// payments), the detection latency changes where duplicates are caught,
// and an outbound effect gets an outbox, not "the same transaction".
func TestDesignDecisionsFromAnswers(t *testing.T) {
	t.Parallel()
	a := Answers{Stack: Stack{Language: "Python", Framework: "Django", Database: "MySQL", Broker: "RabbitMQ"},
		Actions: []Action{
			{Name: "createOrder", Kind: "http", Trigger: "POST /orders", Fields: []string{"cart_id"}, Duration: "1s"},
			{Name: "sendNotification", Kind: "consumer", Fields: []string{"order_id", "template"}, Duration: "4s"},
		},
		RetrySources: []string{"client_retries", "queue_redelivery", "webhook_resends"}, ClientRetryWindow: "48h",
		DetectionLatency: "within 5 minutes"}
	d, err := Build(a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := Render(d)
	if err := Check(d, out); err != nil {
		t.Fatal(err)
	}
	s := html.UnescapeString(string(out))
	for _, bad := range []string{"Stripe", "PayPal", "Adyen", "How long clients retry"} {
		if strings.Contains(s, bad) {
			t.Errorf("a team without payments, whose client window is stated, is told about %q", bad)
		}
	}
	for _, want := range []string{
		"How long the broker redelivers a message assumed 3d: not answered (queue_redelivery_window)",
		"How long your webhook senders resend a delivery assumed 3d: not answered (webhook_resend_window)",
		"client retries (stated)",
		"Retention not stated: 3d",
	} {
		if !slices.ContainsFunc(d.Assumptions, func(x string) bool { return strings.Contains(x, want) }) && !strings.Contains(s, want) {
			t.Errorf("document lacks %q", want)
		}
	}
	// Detection within 5m: the local-only order may defer; the
	// notification, which leaves the system, may not.
	if x := d.Actions[0]; !strings.HasPrefix(x.Detection, "may be deferred (within 5m)") {
		t.Errorf("createOrder detection: %q", x.Detection)
	}
	if x := d.Actions[1]; !strings.HasPrefix(x.Detection, "in the request path all the same") {
		t.Errorf("sendNotification detection: %q", x.Detection)
	}
	// The notification: outbox, delivery semantics, a dedup id; never
	// "committed in the same transaction" as the record.
	n := d.Actions[1]
	for _, want := range []string{"outbox", "At-least-once", "At-most-once", "{key}_sendNotification", "idempotency key or message id"} {
		if !strings.Contains(n.Delivery, want) {
			t.Errorf("sendNotification delivery lacks %q: %s", want, n.Delivery)
		}
	}
	if !slices.ContainsFunc(d.Assumptions, func(x string) bool { return strings.HasPrefix(x, "sendNotification assumed to send a message") }) {
		t.Error("the outbound effect inferred from the name is not stated as an assumption")
	}
	for _, r := range n.Recovery {
		if strings.HasPrefix(r, "Effects commit") {
			t.Errorf("an outbound notification is told: %q", r)
		}
	}
	if !slices.ContainsFunc(n.Recovery, func(r string) bool { return strings.Contains(r, "an outbox row in the same transaction") }) {
		t.Errorf("the notification's recovery path has no outbox: %q", n.Recovery)
	}
	if !strings.Contains(s, "Outbound effects of sendNotification") || strings.Contains(s, "Outbound effects of createOrder") {
		t.Error("section 5 does not give exactly the notification its outbound effects")
	}

	// Synchronous: every claim in the request path.
	a.DetectionLatency = "synchronous"
	d, err = Build(a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range d.Actions {
		if !strings.HasPrefix(x.Detection, "synchronous: the claim is in the request path") {
			t.Errorf("%s detection: %q", x.Name, x.Detection)
		}
	}
	// Payments: the providers' own webhook window, named.
	a.Providers, a.Actions[0].Provider = []string{"stripe"}, "stripe"
	d, err = Build(a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.Horizons, func(h Horizon) bool { return h.Source == "webhook resends (Stripe: up to 3 days)" }) {
		t.Errorf("horizons: %+v", d.Horizons)
	}
	if _, _, err := ParseLatency("whenever"); err == nil {
		t.Error("a latency that is neither synchronous nor a duration was accepted")
	}
}
