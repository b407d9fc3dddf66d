package design

import (
	"slices"
	"strings"
	"testing"
)

// sectionText is the text of section id: its paragraphs, list items and
// table cells, joined by newlines.
func sectionText(d *Document, id string) string {
	var b strings.Builder
	for _, bl := range sectionOf(d, id).Blocks {
		b.WriteString(bl.Text + "\n")
		for _, it := range bl.Items {
			b.WriteString(it + "\n")
		}
		for _, r := range bl.Rows {
			b.WriteString(strings.Join(r, " | ") + "\n")
		}
	}
	return b.String()
}

// actionRows returns section 1's property table of action name as a map.
func actionRows(t *testing.T, d *Document, name string) map[string]string {
	t.Helper()
	bs := sectionOf(d, "s1-actions").Blocks
	for i, bl := range bs {
		if bl.Kind == "h3" && bl.Text == name && i+1 < len(bs) && bs[i+1].Kind == "table" {
			m := map[string]string{}
			for _, r := range bs[i+1].Rows {
				m[r[0]] = r[1]
			}
			return m
		}
	}
	t.Fatalf("section 1 has no table for %s", name)
	return nil
}

// sourcesOf returns the retry-source list section 1 shows for name.
func sourcesOf(t *testing.T, d *Document, name string) string {
	t.Helper()
	bs := sectionOf(d, "s1-actions").Blocks
	for i, bl := range bs {
		if bl.Kind == "p" && bl.Text == "Retry sources that reach "+name+":" && i+1 < len(bs) {
			return strings.Join(bs[i+1].Items, "\n")
		}
	}
	t.Fatalf("section 1 lists no retry sources for %s", name)
	return ""
}

// TestDesignSection1ImpactSourcesFields: section 1 says, per action, what
// a duplicate costs (derived from its provider, effects and kind, or a
// stated assumption in the Assumptions box), which retry sources reach it
// (from the answers and its kind) and its significant fields.
func TestDesignSection1ImpactSourcesFields(t *testing.T) {
	t.Parallel()
	type want struct {
		action, impact, fields string
		impactAssumed          bool
		sources, notSources    []string
	}
	cases := []struct {
		file  string
		edit  func(*Answers)
		wants []want
	}{
		{"fastapi-postgres-stripe", nil, []want{
			{"charge", "money moved twice: a second charge at Stripe", "customer_id, amount, currency, payment_method", false,
				[]string{"client timeouts and retries"}, []string{"broker redelivery", "sender's resends"}},
			{"stripeWebhook", "the event applied twice: a duplicate record", "event_type, object_id", true,
				[]string{"the sender's resends"}, []string{"client timeouts", "double clicks"}},
		}},
		{"django-mysql-rabbitmq", nil, []want{
			{"createBooking", "a duplicate record in your database (its local writes done twice: a second booking)", "room_id, check_in, check_out, guests", true,
				[]string{"client timeouts", "double clicks"}, []string{"load-balancer", "broker redelivery"}},
			{"sendConfirmation", "a second confirmation email to the guest", "not answered: the fingerprint covers the action only", false,
				[]string{"broker redelivery", "RabbitMQ: an unacknowledged message is requeued"}, []string{"client timeouts", "inherent"}},
		}},
		{"spring-postgres-kafka-adyen", nil, []want{
			{"authorise", "money moved twice: a second charge at Adyen", "merchant_account, amount", false, []string{"client timeouts"}, []string{"Kafka"}},
			{"settleOrder", "the message applied twice", "not answered", true, []string{"Kafka: records after the last committed offset"}, []string{"client timeouts"}},
		}},
		// A consumer whose redelivery was not answered still has it.
		{"spring-postgres-kafka-adyen", func(a *Answers) { a.RetrySources = []string{"client_retries"} }, []want{
			{"settleOrder", "the message applied twice", "not answered", true, []string{"inherent to a consumer action"}, nil},
		}},
		{"go-chi-redis", nil, []want{
			{"sendNotification", "a second message (notification) sent outside your database", "not answered: the fingerprint covers the route only", false,
				[]string{"client timeouts", "load-balancer or proxy replay"}, []string{"double clicks"}},
		}},
	}
	for _, tc := range cases {
		d, _ := answersDoc(t, "testdata/stacks/"+tc.file+".yaml", tc.edit)
		for _, w := range tc.wants {
			rows := actionRows(t, d, w.action)
			if !strings.Contains(rows["a duplicate costs"], w.impact) {
				t.Errorf("%s/%s: a duplicate costs %q, want %q", tc.file, w.action, rows["a duplicate costs"], w.impact)
			}
			inBox := slices.ContainsFunc(d.Assumptions, func(s string) bool {
				return strings.HasPrefix(s, "Duplicate impact of "+w.action+" assumed") && strings.Contains(s, "not answered")
			})
			if inBox != w.impactAssumed || strings.Contains(rows["a duplicate costs"], "assumed") != w.impactAssumed {
				t.Errorf("%s/%s: impact assumed: in the box %v, marked %q; want %v", tc.file, w.action, inBox, rows["a duplicate costs"], w.impactAssumed)
			}
			if !strings.Contains(rows["significant fields"], w.fields) {
				t.Errorf("%s/%s: significant fields %q, want %q", tc.file, w.action, rows["significant fields"], w.fields)
			}
			src := sourcesOf(t, d, w.action)
			for _, s := range w.sources {
				if !strings.Contains(src, s) {
					t.Errorf("%s/%s: retry sources lack %q:\n%s", tc.file, w.action, s, src)
				}
			}
			for _, s := range w.notSources {
				if strings.Contains(src, s) {
					t.Errorf("%s/%s: retry sources have %q, which does not reach it:\n%s", tc.file, w.action, s, src)
				}
			}
		}
	}
}

// TestDesignSection4ClockSkewContested: section 4 says whose clock decides
// lease expiry on the answers' store, the maximum skew assumed (also in
// the Assumptions box) and what happens beyond it; and what a second
// request for an in-flight key gets, per action, with its lock timeout.
func TestDesignSection4ClockSkewContested(t *testing.T) {
	t.Parallel()
	cases := []struct {
		db, clock, skew string
	}{
		{"PostgreSQL", "PostgreSQL's now()", "at most 3s"},
		{"MySQL", "MySQL's NOW(6)", "at most 3s"},
		{"Redis", "Redis's TIME, read inside the Lua script", "at most 3s"},
		{"DynamoDB", "skew buffer of 2s", "at most 2s"},
		{"MongoDB", "$$NOW", "at most 3s"},
	}
	for _, tc := range cases {
		d, _ := answersDoc(t, "testdata/stacks/django-mysql-rabbitmq.yaml", func(a *Answers) { a.Stack.Database = tc.db })
		s4 := sectionText(d, "s4-concurrency")
		if !strings.Contains(s4, "Whose clock decides") || !strings.Contains(s4, tc.clock) {
			t.Errorf("%s: section 4 does not say the clock is %q:\n%s", tc.db, tc.clock, s4)
		}
		if !strings.Contains(s4, "The maximum skew assumed is "+strings.TrimPrefix(tc.skew, "at most ")) || !strings.Contains(s4, "Beyond it,") {
			t.Errorf("%s: section 4 does not state the maximum skew %s and what happens beyond it:\n%s", tc.db, tc.skew, s4)
		}
		if !slices.ContainsFunc(d.Assumptions, func(s string) bool { return strings.HasPrefix(s, "Clock skew") && strings.Contains(s, tc.skew) }) {
			t.Errorf("%s: the Assumptions box does not state the skew %s:\n%s", tc.db, tc.skew, strings.Join(d.Assumptions, "\n"))
		}
		for _, x := range d.Actions {
			var row []string
			for _, bl := range sectionOf(d, "s4-concurrency").Blocks {
				if bl.Kind == "table" && len(bl.Head) > 1 && bl.Head[1] == "a second request for an in-flight key gets" {
					for _, r := range bl.Rows {
						if r[0] == x.Name {
							row = r
						}
					}
				}
			}
			if row == nil {
				t.Fatalf("%s: no contested-lock row for %s", tc.db, x.Name)
			}
			want := "409 Conflict at once, with Retry-After"
			if x.Kind == "consumer" {
				want = "left unacknowledged"
			}
			if !strings.Contains(row[1], want) || row[2] != human(x.LockTimeout) || !strings.Contains(row[3], human(x.LockTimeout)) {
				t.Errorf("%s/%s: contested lock %q, want %q with the lock timeout %s", tc.db, x.Name, row, want, human(x.LockTimeout))
			}
		}
	}
	// A fast action reached by double clicks is told when waiting pays.
	d, _ := answersDoc(t, "testdata/stacks/django-mysql-rabbitmq.yaml", func(a *Answers) { a.Actions[0].Duration = "300ms" })
	if s4 := sectionText(d, "s4-concurrency"); !strings.Contains(s4, "spare a browser's double click the 409") {
		t.Errorf("section 4 does not weigh waiting for a 300ms action reached by double clicks:\n%s", s4)
	}
}
