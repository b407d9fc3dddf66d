package design

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Section 1's per-action facts (what a duplicate costs, which retry
// sources reach the action, what it covers) and section 4's clock-skew and
// contested-lock decisions.

// impact says what a duplicate of x costs, from its provider, its
// outbound effects, its steps and its kind. assumed is true when nothing
// of its effects was answered: the impact is then a stated assumption.
func impact(x ActionPlan, providers []ProviderPlan) (text string, assumed bool) {
	var parts []string
	if x.Provider != "" {
		what := "charge"
		if strings.Contains(strings.ToLower(x.Name), "refund") {
			what = "refund"
		}
		var at []string
		if x.Provider == "any" {
			for _, p := range providers {
				at = append(at, p.Name)
			}
		} else if pf, ok := providerFacts[x.Provider]; ok {
			at = append(at, pf.Name)
		}
		parts = append(parts, fmt.Sprintf("money moved twice: a second %s at %s", what, strings.Join(at, " or ")))
	}
	for _, e := range x.Outbound {
		parts = append(parts, "a second "+strings.TrimPrefix(strings.TrimPrefix(e, "a "), "an "))
	}
	for _, s := range x.Steps {
		if s.Remote && x.Provider == "" {
			parts = append(parts, "the remote step "+s.Name+" done twice")
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "; "), false
	}
	rec := "a duplicate record in your database (its local writes done twice"
	if n := recordNoun(x.Name); n != "" {
		rec += ": a second " + n
	}
	rec += ")"
	switch x.Kind {
	case "consumer":
		rec = "the message applied twice: " + rec
	case "webhook":
		rec = "the event applied twice: " + rec
	case "cron":
		rec = "the slot's run done twice: " + rec
	}
	return rec, true
}

var verbPrefix = regexp.MustCompile(`^(create|add|new|place|submit|make|post|book|register|open|insert|record|save)`)

// recordNoun is the thing an action creates, from its name:
// createBooking -> "booking", placeOrder -> "order"; "" when the name has
// no verb prefix.
func recordNoun(name string) string {
	loc := verbPrefix.FindStringIndex(strings.ToLower(name))
	if loc == nil || loc[1] >= len(name) {
		return ""
	}
	rest := name[loc[1]:]
	var b strings.Builder
	for i, r := range rest {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte(' ')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return strings.Trim(b.String(), " _-")
}

// retrySource is one answer to question 3 and the kinds of action it
// reaches.
type retrySource struct {
	id, text string
	kinds    []string
}

var retrySourceFacts = []retrySource{
	{"client_retries", "client timeouts and retries: a lost or slow response retried with the same key", []string{"http"}},
	{"double_click", "double clicks and double submits of one form", []string{"http"}},
	{"lb_replay", "load-balancer or proxy replay of a request whose upstream timed out", []string{"http", "webhook"}},
	{"webhook_resends", "the sender's resends of a delivery until it gets a 2xx", []string{"webhook"}},
	{"queue_redelivery", "broker redelivery (at-least-once): an unacknowledged message after a consumer crash, a timeout or a rebalance", []string{"consumer"}},
	{"cron_overlap", "overlapping runs: a slow run still going at the next tick, a catch-up after downtime, two schedulers", []string{"cron"}},
}

// inherentSource is the retry source every action of a kind has, answered
// or not.
var inherentSource = map[string]string{
	"http":     "client_retries",
	"webhook":  "webhook_resends",
	"consumer": "queue_redelivery",
	"cron":     "cron_overlap",
}

// retrySourcesOf lists the retry sources that reach x: those answered
// that apply to its kind, and the one inherent to its kind when it was not
// answered (said so).
func retrySourcesOf(x ActionPlan, a Answers) []string {
	var out []string
	for _, s := range retrySourceFacts {
		if slices.Contains(a.RetrySources, s.id) && slices.Contains(s.kinds, x.Kind) {
			out = append(out, s.text+brokerRedelivery(s.id, a.Stack.Broker))
		}
	}
	if in := inherentSource[x.Kind]; in != "" && !slices.Contains(a.RetrySources, in) {
		for _, s := range retrySourceFacts {
			if s.id == in {
				out = append(out, s.text+brokerRedelivery(s.id, a.Stack.Broker)+" (not among your answered retry sources, but inherent to a "+x.Kind+" action)")
			}
		}
	}
	return out
}

func brokerRedelivery(id, broker string) string {
	if id != "queue_redelivery" {
		return ""
	}
	b := strings.ToLower(broker)
	switch {
	case strings.Contains(b, "kafka"):
		return "; Kafka: records after the last committed offset come again after a rebalance or a restart"
	case strings.Contains(b, "rabbit") || strings.Contains(b, "amqp"):
		return "; RabbitMQ: an unacknowledged message is requeued when its channel closes"
	case strings.Contains(b, "sqs"):
		return "; SQS: a message not deleted within its visibility timeout is delivered again"
	}
	return ""
}

// fieldsText is section 1's account of x's significant fields.
func fieldsText(x ActionPlan) string {
	switch {
	case len(x.Fields) == 0:
		return "not answered: the fingerprint covers the " + map[bool]string{true: "route", false: "action"}[x.Kind == "http"] + " only (see Assumptions and section 3)"
	case x.FieldsAssumption != "":
		return strings.Join(x.Fields, ", ") + " (assumed: see Assumptions)"
	}
	return strings.Join(x.Fields, ", ")
}

// skewAssumption is the largest clock difference the design tolerates,
// per store, and what happens beyond it.
func skewAssumption(d *Document) (maxSkew time.Duration, whose, beyond string) {
	lt := minLock
	for _, x := range d.Actions {
		lt = min(lt, x.LockTimeout)
	}
	margin := lt / 10
	stale := "a holder cut off from the store runs on past the end of its lease while a retry reclaims the key: two runs at once. The fencing token (lock_version) still refuses the stale holder's outcome, but not its side effects: each external call checks the lease first"
	switch d.Store {
	case StorePostgres:
		return margin, "PostgreSQL's now(), read in the very statement that claims, reclaims, completes or expires a record: one clock, the database's; the application hosts' clocks are never compared", stale
	case StoreMySQL:
		return margin, "MySQL's NOW(6), read in the statement that claims, reclaims or completes a record (SELECT ... FOR UPDATE then UPDATE in one transaction): the database's clock only", stale
	case StoreRedis:
		return margin, "Redis's TIME, read inside the Lua script that claims, reclaims or completes a record (one script, one clock: a cluster uses the clock of the key's primary)", stale
	case StoreMongo:
		return margin, "MongoDB's $$NOW, read in the update pipeline of findOneAndUpdate: the server's clock, never the application's", stale
	case StoreDynamo:
		return 2 * time.Second, "the application's clock: DynamoDB's condition expressions have no clock, so each instance computes lease ends and expiry itself and compares them with a skew buffer of 2s (a lease is taken over only once it ended 2s ago by the claimant's clock)",
			"an instance whose clock runs ahead by more than the buffer takes over a live lease: two holders at once (the fencing token still refuses the stale one's outcome, not its side effects), and records expire early by the difference. Watch the hosts' NTP offset (node_timex_offset_seconds) and alert well below 2s"
	}
	return margin, "the database's own current time, read in the statement that decides (never the application's)", stale
}

// contested is what a second request for an in-flight key of x gets, and
// why.
func contested(x ActionPlan, a Answers) (gets, why string) {
	lt := human(x.LockTimeout)
	switch x.Kind {
	case "consumer":
		return "the duplicate delivery is not processed: it is left unacknowledged (or nacked with a delay) and the broker redelivers it later, when the first holder's outcome is recorded and replayed",
			fmt.Sprintf("blocking a consumer on another's lease (up to %s) stalls its whole partition or prefetch; the broker's own redelivery is the retry", lt)
	case "cron":
		return "the overlapping run skips the slot: the slot's work is the holder's",
			fmt.Sprintf("a second run waiting up to %s would only run after the first and find the slot done", lt)
	}
	gets = "409 Conflict at once, with Retry-After set to the lease's remaining time (at least 1s); the retry after it gets the replay"
	why = fmt.Sprintf("the holder may run up to its lock timeout (%s); a waiting request would hold a server worker and a database connection that long, and a retry loop or a double-click storm multiplies them; the client retries with the same key anyway", lt)
	if slices.Contains(a.RetrySources, "double_click") && x.DurationD <= time.Second {
		why += fmt.Sprintf(". Waiting (polling the record until the outcome, at most the p99 %s) would spare a browser's double click the 409 on this fast action; it is the one case where waiting pays", human(x.DurationD))
	}
	return gets, why
}

// skewAbsorbed says what absorbs a skew up to the one assumed.
func skewAbsorbed(goCode bool, store string) string {
	switch {
	case store == StoreDynamo:
		return "every lease is taken over only once it ended that long ago by the claimant's clock, so instances whose clocks differ by less never take over a live lease."
	case goCode:
		return "a holder stops on its own monotonic clock that long before its lease can end in the store (the executor's lease margin, a tenth of the shortest lock timeout), which absorbs a store clock that steps ahead."
	}
	return "every lock timeout is at least 30s and 1.5x its p99 (C3), far more than that, so a store clock that steps ahead by up to it does not end a live holder's lease; a holder that takes longer than its lock timeout is taken over."
}
