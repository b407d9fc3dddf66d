package design

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func answersDoc(t *testing.T, file string, edit func(*Answers)) (*Document, string) {
	t.Helper()
	a, err := LoadAnswers(file)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(a)
	}
	d, err := Build(*a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(d, out); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d, html.UnescapeString(string(out))
}

func sectionOf(d *Document, id string) Section {
	for _, s := range d.Sections {
		if s.ID == id {
			return s
		}
	}
	return Section{}
}

// TestDesignAntiPatternsSeedTen: section 9 lists the seed's ten
// anti-patterns, each with why and the fix, and marks those relevant to
// the stack: the provider one only with providers, partitioning only at
// high volume.
func TestDesignAntiPatternsSeedTen(t *testing.T) {
	t.Parallel()
	relevant := func(d *Document) map[string]bool {
		m := map[string]bool{}
		for _, x := range antiPatterns(d) {
			m[x.ID] = x.Relevant != ""
		}
		return m
	}
	for _, file := range []string{"testdata/checkout.yaml", "testdata/stacks/go-chi-redis.yaml", "testdata/stacks/django-mysql-rabbitmq.yaml"} {
		d, s := answersDoc(t, file, nil)
		ap := antiPatterns(d)
		if len(ap) < 10 {
			t.Fatalf("%s: %d anti-patterns", file, len(ap))
		}
		for i, id := range seedAntiPatternIDs {
			x := ap[i]
			if x.ID != id || x.Name == "" || x.Why == "" || x.Fix == "" {
				t.Errorf("%s: anti-pattern %d is %+v, want %s with why and fix", file, i+1, x, id)
			}
			if !strings.Contains(s, x.Name) || !strings.Contains(s, x.Fix) {
				t.Errorf("%s: section 9 lacks %q or its fix", file, x.Name)
			}
		}
		tab := sectionOf(d, "s9-anti-patterns").Blocks[1]
		if !slices.Equal(tab.Head, []string{"anti-pattern", "why it breaks", "the fix", "relevant here"}) {
			t.Errorf("%s: section 9 head %q", file, tab.Head)
		}
		// Kept: payonce's own.
		for _, keep := range []string{"retention shorter than a retry horizon", "treating a timeout as a failure"} {
			if !strings.Contains(s, keep) {
				t.Errorf("%s: lost %q", file, keep)
			}
		}
	}
	d, _ := answersDoc(t, "testdata/checkout.yaml", nil)
	if r := relevant(d); !r["trusting-provider"] || !r["check-then-act"] || !r["unencrypted-responses"] {
		t.Errorf("checkout (payments): relevance %v", r)
	}
	d, _ = answersDoc(t, "testdata/stacks/go-chi-redis.yaml", nil)
	if r := relevant(d); r["trusting-provider"] || r["no-partitioning-plan"] || !r["app-clock"] {
		t.Errorf("go-chi-redis (no payments, 200k live keys, multi-instance): relevance %v", r)
	}
	// 1M a day kept 60 days: 60M live records.
	d, s := answersDoc(t, "testdata/stacks/go-chi-redis.yaml", func(a *Answers) { a.VolumePerDay = 1000000; a.Retention = "60d" })
	if r := relevant(d); !r["no-partitioning-plan"] {
		t.Errorf("60M live records: partitioning not marked relevant: %v", r)
	}
	if !strings.Contains(s, "Why not partition by created_at") || !strings.Contains(s, "6e+07 live records") {
		t.Error("the partitioning row does not give the volume and the measured rejection")
	}
}

// TestDesignBuildOrderSeedTen: section 12 and D8 have the seed's ten
// steps, each with its deployment safety note; payments only with
// providers.
func TestDesignBuildOrderSeedTen(t *testing.T) {
	t.Parallel()
	notes := []string{"schema first", "expand/contract", "shadow mode", "alerts before enforce", "per-route rollout",
		"cleanup job", "load test", "chaos/kill test", "runbook", "review"}
	for _, file := range []string{"testdata/checkout.yaml", "testdata/stacks/go-chi-redis.yaml"} {
		d, s := answersDoc(t, file, nil)
		rows := sectionOf(d, "s12-build-order").Blocks[0].Rows
		if len(rows) != 10 {
			t.Fatalf("%s: %d build-order steps, want 10", file, len(rows))
		}
		for i, r := range rows {
			if r[1] == "" || !strings.HasPrefix(r[2], notes[i]+":") {
				t.Errorf("%s: step %d %q has safety note %q, want %q", file, i+1, r[1], r[2], notes[i])
			}
		}
		items := sectionOf(d, "d8-build-order").Blocks[0].Items
		if len(items) != 10 || !strings.Contains(items[3], "alerts before enforce") {
			t.Errorf("%s: D8 %q", file, items)
		}
		pay := strings.Contains(s, "through payments.Client (intent before the call")
		if pay != (len(d.Providers) > 0) {
			t.Errorf("%s: payments step present %v with %d providers", file, pay, len(d.Providers))
		}
	}
}

// TestDesignScenarioTable: section 11 is Scenario | Expectation |
// Verifies, with the saga resume for a multi-step action and the provider
// scenarios only with providers; D6's Go skeleton has a test per row.
func TestDesignScenarioTable(t *testing.T) {
	t.Parallel()
	d, s := answersDoc(t, "testdata/checkout.yaml", nil)
	tab := sectionOf(d, "s11-tests").Blocks[1]
	if !slices.Equal(tab.Head, []string{"Scenario", "Expectation", "Verifies"}) {
		t.Fatalf("section 11 head %q", tab.Head)
	}
	has := func(rows [][]string, scen string) bool {
		return slices.ContainsFunc(rows, func(r []string) bool { return r[0] == scen && r[1] != "" && r[2] != "" })
	}
	for _, want := range []string{"a crash during compensation", "a saga step fails permanently", "the provider's answer is lost after it committed", "50 concurrent requests with one key"} {
		if !has(tab.Rows, want) {
			t.Errorf("checkout: section 11 lacks %q", want)
		}
	}
	// Routes Protect guards get runnable tests (lab/designkit runs them);
	// payments and consumers are named with what covers them.
	for _, fn := range []string{"func TestInventoryConcurrentSameKeyOneEffect(", "func TestInventoryHolderKilledReclaimed(", "TestCheckoutSagaResumesCompensation", "TestCheckoutLostProviderAnswer", "TestWebhookReplaysSameKey"} {
		if !strings.Contains(s, fn) {
			t.Errorf("D6 lacks %s", fn)
		}
	}
	if strings.Contains(s, "LostProviderAnswer(") || strings.Contains(s, "TestChargeSagaResumesCompensation") || strings.Contains(s, "t.Skip(\"to write") {
		t.Error("D6 has a provider or saga test for an action without one, or a stub")
	}
	d, _ = answersDoc(t, "testdata/stacks/go-chi-redis.yaml", nil)
	tab = sectionOf(d, "s11-tests").Blocks[1]
	if len(tab.Rows) != 8 || has(tab.Rows, "a crash during compensation") {
		t.Errorf("go-chi-redis: %d scenarios, want the seed's 8 without providers or sagas", len(tab.Rows))
	}
}

// TestDesignHTMLDecisionsFirst: the decisions come before the contents,
// long DDL and rule files are collapsed, and no table cell may break a
// word in the middle.
func TestDesignHTMLDecisionsFirst(t *testing.T) {
	t.Parallel()
	_, out := checkoutDoc(t, HTML)
	s := string(out)
	if i, j := strings.Index(s, `id="decisions"`), strings.Index(s, `id="toc"`); i < 0 || i > j {
		t.Error("the key decisions do not come before the contents")
	}
	if strings.Contains(s, "overflow-wrap:anywhere") || !strings.Contains(s, "word-break:normal;overflow-wrap:break-word;hyphens:manual") {
		t.Error("table cells may break words mid-word")
	}
	ddl := s[strings.Index(s, `id="d2-ddl"`):strings.Index(s, `id="d3-middleware"`)]
	rules := s[strings.Index(s, `id="d7-monitoring-config"`):strings.Index(s, `id="d8-build-order"`)]
	if !strings.Contains(ddl, "<details><summary>") || !strings.Contains(rules, "<details><summary>") {
		t.Error("long DDL or rule files are not collapsed")
	}
	_, md := checkoutDoc(t, Markdown)
	if i, j := strings.Index(string(md), "**Key decisions**"), strings.Index(string(md), "## Contents"); i < 0 || i > j || !strings.Contains(string(md), "| checkout | {scope}_checkout_{intent} | client | 30s |") {
		t.Error("markdown: the key decisions do not come first")
	}
	if mw := s[strings.Index(s, `id="d3-middleware"`):strings.Index(s, `id="d4-fingerprint"`)]; strings.Contains(mw, "<details>") {
		t.Error("the middleware, code the reader edits, is collapsed")
	}
}
