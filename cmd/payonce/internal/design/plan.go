package design

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Document is a generated design: the decisions ([ActionPlan], retention,
// providers) and the sections that present them. [Check] verifies the
// seven constraints on it before it is written.
type Document struct {
	Title     string
	Service   string
	Format    Format
	Generated time.Time
	// Agnostic: the stack is unknown, the design is technology-agnostic:
	// the logical model, and code that needs adaptation.
	Agnostic bool
	// Store is the store the record is mapped onto (StorePostgres, ...,
	// StoreUnknown), from the database answer.
	Store string
	// DetectionSync: duplicates are detected in the request itself;
	// otherwise within DetectionWithin.
	DetectionSync   bool
	DetectionWithin time.Duration
	Answers         Answers
	Assumptions     []string
	Actions         []ActionPlan
	Providers       []ProviderPlan
	// Retention is the key retention chosen, RetentionReason why.
	Retention       time.Duration
	RetentionReason string
	// Horizons are the retry horizons retention must cover.
	Horizons []Horizon
	Findings []Finding
	// Sections are the 12 sections then the 9 deliverables, in order.
	Sections []Section
}

// Horizon is how long one retry source can bring a request back.
type Horizon struct {
	Source string
	Window time.Duration
}

// ActionPlan is the design of one protected action.
type ActionPlan struct {
	Action
	KeyFormat  string
	KeyExample string
	ScopeFrom  string
	Generator  string
	IntentBits int
	// Collision is the birthday-bound probability of two intents
	// colliding within one retention period, at the stated volume.
	Collision    float64
	KeysInWindow float64
	// UniqueBy says what a server key's uniqueness rests on: the
	// cardinality of its identifying fields, which the hash cannot add.
	// Empty for client keys, whose intent is random.
	UniqueBy string
	Excluded []string
	// FieldsAssumption is the stated assumption when the significant
	// fields were not answered ("" when they were); FieldsGuide says how
	// to choose them.
	FieldsAssumption string
	FieldsGuide      string
	// DurationAssumption is the stated assumption when the p99 was not
	// answered ("" when it was).
	DurationAssumption string
	DurationD          time.Duration
	LockTimeout        time.Duration
	Heartbeat          time.Duration
	LockReason         string
	Recovery           []string
	// Outbound are the side effects that leave the system (a message, a
	// call): no transaction takes them back. OutboundAssumption is set
	// when they were inferred from the action's name.
	Outbound           []string
	OutboundAssumption string
	// Delivery says how an outbound effect is delivered once (outbox,
	// provider-side dedup id, at-least-once or at-most-once).
	Delivery string
	// Detection says where the duplicate is detected, from the answer to
	// the detection-latency question.
	Detection string
	Refs      []ProviderRef
	// Impact is what a duplicate costs (money moved twice, a duplicate
	// record, a second e-mail); ImpactAssumption is set when it was
	// assumed because the action's effects were not answered.
	Impact           string
	ImpactAssumption string
	// RetrySources are the retry sources that reach this action.
	RetrySources []string
}

// MultiStep reports whether the action has more than one step.
func (a ActionPlan) MultiStep() bool { return len(a.Steps) > 1 }

// ProviderRef is the provider reference of one provider call.
type ProviderRef struct {
	Provider string
	Step     string
	Header   string
	Value    string
	// Derived: computed from the key, the step and the attempt only.
	Derived bool
}

// ProviderPlan is one chosen provider's coordination facts.
type ProviderPlan struct {
	Name, Header, MaxLen, Window, Reference, Lookup string
	WindowD                                         time.Duration
}

var providerFacts = map[string]ProviderPlan{
	"stripe": {Name: "Stripe", Header: "Idempotency-Key", MaxLen: "255",
		Window: "at least 24h (a key reused after pruning starts a new request)", WindowD: 24 * time.Hour,
		Reference: "Idempotency-Key = {key}_{step}_{attempt} (hashed beyond 255); metadata carries the key",
		Lookup:    "within 24h resend with the same key; later List PaymentIntents by creation window and match metadata"},
	"adyen": {Name: "Adyen", Header: "Idempotency-Key", MaxLen: "64 (reference 80)",
		Window: "7 days (design for 7; older docs said 31)", WindowD: 7 * 24 * time.Hour,
		Reference: "reference = {key}_{step} (<= 80, hashed beyond) plus Idempotency-Key (<= 64, hashed)",
		Lookup:    "no GET by reference: resend within 7 days, the AUTHORISATION webhook, or technical cancel by reference"},
	"paypal": {Name: "PayPal", Header: "PayPal-Request-Id", MaxLen: "108 (Orders)",
		Window: "6h for Orders v2 create and capture; 45 days for refunds of captures", WindowD: 45 * 24 * time.Hour,
		Reference: "PayPal-Request-Id = UUIDv5(payonce namespace, {key}_{step}_{attempt}); custom_id carries the key",
		Lookup:    "resend within the window; GET the order by id; Transaction Search (lags up to 3h) past it"},
	"bank_transfer": {Name: "Bank transfer", Header: "end-to-end id / remittance reference", MaxLen: "35 (SEPA EndToEndId)",
		Window: "no provider deduplication: the bank executes every instruction it receives", WindowD: 0,
		Reference: "EndToEndId = first 35 chars of base32(sha256({key}_{step})), never regenerated",
		Lookup:    "match the bank statement (camt.053) on the EndToEndId before any re-submission"},
}

func providerKey(p string) string {
	p = strings.ToLower(strings.TrimSpace(p))
	switch p {
	case "bank", "bank transfer", "bank-transfer", "sepa", "ach":
		return "bank_transfer"
	}
	return p
}

// Defaults and horizons.
const (
	defaultVolume = 100000
	defaultClient = 24 * time.Hour
	defaultQueue  = 72 * time.Hour
	webhookResend = 72 * time.Hour // PayPal: 25 redeliveries over 3 days; Stripe: up to 3 days
	minLock       = 30 * time.Second
)

// Build turns answers (already completed by a scan and the questions)
// into a document. now is the generation time.
func Build(a Answers, findings []Finding, now time.Time) (*Document, error) {
	d := &Document{Answers: a, Generated: now.UTC(), Findings: findings}
	f, err := ParseFormat(a.Format)
	if err != nil {
		return nil, err
	}
	d.Format = f
	d.Service = a.Service
	if d.Service == "" {
		d.Service = "your service"
	}
	d.Title = "Idempotency design: " + d.Service
	if len(a.Actions) == 0 || !a.Stack.Known() {
		d.Agnostic = !a.Stack.Known()
	}
	if len(a.Actions) == 0 {
		a.Actions = []Action{{Name: "createOrder", Kind: "http", Trigger: "POST /orders"}}
		d.Assumptions = append(d.Assumptions, "No protected action was named: the design covers one generic write, createOrder (POST /orders); repeat it for each of your actions.")
	}
	if d.Agnostic {
		d.Assumptions = append(d.Assumptions, "The stack is unknown: this design is technology-agnostic: the record's logical model and its three atomic decisions (D2), and code samples that need adaptation to your language, framework and database.")
	}
	if len(a.RetrySources) == 0 {
		a.RetrySources = []string{"client_retries", "double_click", "lb_replay"}
		d.Assumptions = append(d.Assumptions, "Retry sources not stated: assumed client retries, double clicks and load-balancer replay.")
	}
	if a.Concurrency == "" {
		a.Concurrency = "multi-instance"
		d.Assumptions = append(d.Assumptions, "Concurrency not stated: assumed several instances behind a load balancer (the database, not process memory, must arbitrate).")
	}
	if a.VolumePerDay <= 0 {
		a.VolumePerDay = defaultVolume
		d.Assumptions = append(d.Assumptions, fmt.Sprintf("Volume not stated: assumed %d protected requests a day.", defaultVolume))
	}
	if a.DetectionLatency == "" {
		a.DetectionLatency = "synchronous"
		d.Assumptions = append(d.Assumptions, "Duplicate detection latency not stated: assumed synchronous, in the request itself (a unique constraint, not an after-the-fact job).")
	}
	d.DetectionSync, d.DetectionWithin, err = ParseLatency(a.DetectionLatency)
	if err != nil {
		return nil, err
	}
	d.Store = StoreOf(a.Stack.Database)
	for i, p := range a.Providers {
		a.Providers[i] = providerKey(p)
		if _, ok := providerFacts[a.Providers[i]]; !ok {
			return nil, fmt.Errorf("providers: %q is none of stripe, adyen, paypal, bank_transfer", p)
		}
	}
	sort.Strings(a.Providers)

	// Retry horizons, then retention: from the user's own retry sources
	// and windows; a window not answered is assumed, and said so.
	window := func(answer string, def time.Duration, field, what string) (time.Duration, string, error) {
		if answer != "" {
			w, err := ParseDuration(answer)
			if err != nil {
				return 0, "", fmt.Errorf("%s: %w", field, err)
			}
			return w, "stated", nil
		}
		d.Assumptions = append(d.Assumptions, fmt.Sprintf("%s assumed %s: not answered (%s); retention covers it.", what, human(def), field))
		return def, "assumed", nil
	}
	for _, s := range a.RetrySources {
		switch s {
		case "client_retries":
			w, how, err := window(a.ClientRetryWindow, defaultClient, "client_retry_window", "How long clients retry one key")
			if err != nil {
				return nil, err
			}
			d.Horizons = append(d.Horizons, Horizon{"client retries (" + how + ")", w})
		case "queue_redelivery":
			w, how, err := window(a.QueueRedeliveryWindow, defaultQueue, "queue_redelivery_window", "How long the broker redelivers a message")
			if err != nil {
				return nil, err
			}
			d.Horizons = append(d.Horizons, Horizon{"queue redelivery (" + how + ")", w})
		case "webhook_resends":
			if a.WebhookResendWindow == "" && slices.ContainsFunc(a.Providers, func(p string) bool { return p == "stripe" || p == "paypal" }) {
				// Known facts of the providers named, not of anyone else's.
				var names []string
				for _, p := range a.Providers {
					if p == "stripe" || p == "paypal" {
						names = append(names, providerFacts[p].Name)
					}
				}
				d.Horizons = append(d.Horizons, Horizon{"webhook resends (" + strings.Join(names, " and ") + ": up to 3 days)", webhookResend})
				break
			}
			w, how, err := window(a.WebhookResendWindow, webhookResend, "webhook_resend_window", "How long your webhook senders resend a delivery")
			if err != nil {
				return nil, err
			}
			d.Horizons = append(d.Horizons, Horizon{"webhook resends (" + how + ")", w})
		case "cron_overlap":
			d.Horizons = append(d.Horizons, Horizon{"cron overlap and catch-up (one day of slots)", 24 * time.Hour})
		case "double_click":
			d.Horizons = append(d.Horizons, Horizon{"double click", time.Minute})
		case "lb_replay":
			d.Horizons = append(d.Horizons, Horizon{"load-balancer replay", 5 * time.Minute})
		default:
			return nil, fmt.Errorf("retry_sources: %q is none of client_retries, queue_redelivery, webhook_resends, cron_overlap, double_click, lb_replay", s)
		}
	}
	for _, p := range a.Providers {
		if w := providerFacts[p].WindowD; w > 0 {
			d.Horizons = append(d.Horizons, Horizon{providerFacts[p].Name + " deduplication window", w})
		}
	}
	var longest Horizon
	for _, h := range d.Horizons {
		if h.Window > longest.Window {
			longest = h
		}
	}
	if a.Retention == "" {
		d.Retention = max(longest.Window, 24*time.Hour)
		d.RetentionReason = "the longest retry horizon: " + longest.Source
		if longest.Window < 24*time.Hour {
			d.RetentionReason = fmt.Sprintf("a 24h floor: the longest retry horizon, %s (%s), is shorter, and a day costs little", longest.Source, human(longest.Window))
		}
		d.Assumptions = append(d.Assumptions, fmt.Sprintf("Retention not stated: %s, %s.", human(d.Retention), d.RetentionReason))
	} else {
		r, err := ParseDuration(a.Retention)
		if err != nil {
			return nil, fmt.Errorf("retention: %w", err)
		}
		d.Retention = r
		d.RetentionReason = "as stated"
		if r < longest.Window {
			d.Retention = longest.Window
			d.RetentionReason = fmt.Sprintf("raised from the stated %s to cover %s (%s): a key forgotten inside that horizon turns a retry into a second execution", human(r), longest.Source, human(longest.Window))
		}
	}
	d.Answers = a

	for _, act := range a.Actions {
		p, err := planAction(act, a, d.Retention)
		if err != nil {
			return nil, err
		}
		p.Detection = detection(d, p)
		p.Recovery = recovery(p, d.Store, a.Stack.IsGo())
		var assumed bool
		p.Impact, assumed = impact(p, providersOf(a.Providers))
		if assumed {
			p.ImpactAssumption = fmt.Sprintf("Duplicate impact of %s assumed %s: its effects were not answered; name them (effects) if it also sends or calls something outside your database.", p.Name, p.Impact)
		}
		p.RetrySources = retrySourcesOf(p, a)
		for _, s := range []string{p.DurationAssumption, p.FieldsAssumption, p.OutboundAssumption, p.ImpactAssumption} {
			if s != "" {
				d.Assumptions = append(d.Assumptions, s)
			}
		}
		d.Actions = append(d.Actions, p)
	}
	d.Providers = providersOf(a.Providers)
	maxSkew, _, _ := skewAssumption(d)
	d.Assumptions = append(d.Assumptions, fmt.Sprintf("Clock skew (not asked): at most %s assumed between %s; section 4 says whose clock decides and what happens beyond it.", human(maxSkew), map[bool]string{true: "the application hosts' clocks (DynamoDB compares them)", false: "the store's clock and a holder's own count of its lease"}[d.Store == StoreDynamo]))
	d.Sections = sections(d)
	return d, nil
}

func providersOf(names []string) []ProviderPlan {
	var out []ProviderPlan
	for _, p := range names {
		out = append(out, providerFacts[p])
	}
	return out
}

func durOr(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	return ParseDuration(s)
}

// volatile are the fields a fingerprint never covers.
var volatile = []string{"timestamps (created_at, sent_at)", "trace and request ids (traceparent, X-Request-Id)", "the idempotency key itself", "headers", "field order and insignificant whitespace"}

func isVolatile(field string) bool {
	f := strings.ToLower(field)
	for _, v := range []string{"time", "date", "created_at", "updated_at", "sent_at", "trace", "request_id", "requestid", "span", "idempotency", "nonce"} {
		if strings.Contains(f, v) {
			return true
		}
	}
	return f == "key" || f == "ts"
}

func planAction(act Action, a Answers, retention time.Duration) (ActionPlan, error) {
	p := ActionPlan{Action: act}
	if p.Kind == "" {
		p.Kind = "http"
	}
	if p.KeySource == "" {
		p.KeySource = "client"
		if p.Kind != "http" {
			p.KeySource = "server"
		}
	}
	def, kindText := 2*time.Second, "an HTTP request"
	if p.Kind != "http" {
		def, kindText = 30*time.Second, "a "+p.Kind+" job"
	}
	dd, err := durOr(p.Duration, def)
	if err != nil {
		return p, fmt.Errorf("action %s: duration: %w", p.Name, err)
	}
	p.DurationD = dd
	// Lease: three times the p99, never under 30s, with heartbeats every
	// third: a holder must miss two heartbeats to lose it.
	lt := max(minLock, 3*dd)
	lt = lt.Round(time.Second)
	p.LockTimeout = lt
	p.Heartbeat = lt / 3
	which := "stated"
	if p.Duration == "" {
		which = "assumed"
		p.Duration = human(def) + " (assumed)"
		p.DurationAssumption = fmt.Sprintf("p99 of %s assumed %s (%s): not answered; its lock timeout, %s, follows from it.", p.Name, human(def), kindText, human(lt))
	}
	floor := ""
	if 3*dd < minLock {
		floor = fmt.Sprintf(" (3x is %s, raised to the 30s floor: a shorter lease ends a live holder's on a GC pause or a slow database round trip)", human(3*dd))
	}
	p.LockReason = fmt.Sprintf("3x the %s p99 (%s)%s; heartbeats every %s extend it, so a live holder keeps it and a crashed one frees it within %s; far below retention (%s)", which, human(dd), floor, human(p.Heartbeat), human(lt), human(retention))
	p.ScopeFrom = "the authenticated user or tenant (from the session or token, never the body)"
	if p.Kind != "http" {
		p.ScopeFrom = "the message's tenant or account, set by the producer and checked against the consumer's subscription"
	}
	p.KeyFormat = "{scope}_" + p.Name + "_{intent}"
	if p.KeySource == "client" {
		p.Generator = "client: a UUIDv4 (or ULID) generated once per intent and reused on every retry, sent in Idempotency-Key"
		p.IntentBits = 122
		p.KeyExample = "usr_7fQ9x_" + p.Name + "_0b5e4c1e-9c2a-4f7e-8d3b-6a1f2e9c7d40"
	} else {
		ids := p.IdentifyingFields
		if len(ids) == 0 {
			switch p.Kind {
			case "cron":
				ids = []string{"job name", "scheduled slot time (from the schedule, not the clock)"}
			case "webhook":
				ids = []string{"provider event id"}
			default:
				ids, _ = brokerIdentity(a.Stack.Broker)
			}
			p.IdentifyingFields = ids
		}
		p.UniqueBy = uniqueBy(p.Kind, p.IdentifyingFields, a.Stack.Broker)
		p.Generator = "server: intent = sha256 of " + strings.Join(ids, " + ") + derivedBy(a) + ", identical on every redelivery"
		p.IntentBits = 256
		p.KeyExample = "acct_42_" + p.Name + "_" + DeriveIntentExample(p.Name)
	}
	p.Excluded = volatile
	// Birthday bound over one retention period.
	n := float64(a.VolumePerDay) * retention.Hours() / 24
	p.KeysInWindow = n
	p.Collision = -math.Expm1(-n * (n - 1) / 2 / math.Pow(2, float64(p.IntentBits)))
	if p.Collision == 0 {
		p.Collision = n * (n - 1) / 2 / math.Pow(2, float64(p.IntentBits))
	}
	prov := providerKey(p.Provider)
	if prov == "" && len(a.Providers) == 1 && (strings.Contains(strings.ToLower(p.Name), "charge") || strings.Contains(strings.ToLower(p.Name), "pay") || strings.Contains(strings.ToLower(p.Name), "checkout") || strings.Contains(strings.ToLower(p.Name), "refund")) {
		prov = a.Providers[0]
	}
	if prov != "" {
		p.Provider = prov
		step := "charge"
		for _, s := range p.Steps {
			if s.Remote {
				step = s.Name
				break
			}
		}
		if strings.Contains(strings.ToLower(p.Name), "refund") {
			step = "refund"
		}
		if prov == "any" {
			for _, q := range a.Providers {
				p.Refs = append(p.Refs, providerRef(q, step))
			}
		} else {
			if _, ok := providerFacts[prov]; !ok {
				return p, fmt.Errorf("action %s: provider %q is none of stripe, adyen, paypal, bank_transfer, any", p.Name, p.Provider)
			}
			p.Refs = append(p.Refs, providerRef(prov, step))
		}
	}
	if len(p.Fields) == 0 {
		p.FieldsGuide = fieldsGuide(p.Kind)
		switch {
		case p.Provider != "" && strings.Contains(strings.ToLower(p.Name), "refund"):
			p.Fields = []string{"charge_key", "amount"}
			p.FieldsAssumption = fmt.Sprintf("Significant fields of %s assumed charge_key, amount (a refund: the charge refunded and how much): not answered; check them against your request.", p.Name)
		case p.Provider != "":
			p.Fields = []string{"amount", "currency", "recipient", "payment_method"}
			p.FieldsAssumption = fmt.Sprintf("Significant fields of %s assumed amount, currency, recipient, payment_method (a payment): not answered; check them against your request.", p.Name)
		default:
			p.FieldsAssumption = fmt.Sprintf("Significant fields of %s not answered: none assumed, since a guess would refuse good retries or replay another request. Until you name them, its fingerprint covers the %s only, so a retry with the same key and other fields is replayed, not refused (section 3 says how to choose them).", p.Name, map[bool]string{true: "route", false: "action"}[p.Kind == "http"])
		}
	}
	for _, f := range p.Fields {
		if isVolatile(f) {
			return p, fmt.Errorf("action %s: field %q is volatile (a time, a trace id or the key): it cannot be part of a fingerprint", p.Name, f)
		}
	}
	p.Outbound = p.Effects
	if len(p.Outbound) == 0 && p.Provider == "" {
		if m := outboundName.FindString(strings.ToLower(p.Name)); m != "" {
			p.Outbound = []string{"a message (" + m + ") sent outside your database"}
			p.OutboundAssumption = fmt.Sprintf("%s assumed to send a message outside your database (its name says %q): its effects were not answered; it gets an outbox and a delivery choice in section 5.", p.Name, m)
		}
	}
	if len(p.Outbound) > 0 {
		p.Delivery = delivery(p)
	}
	return p, nil
}

// outboundName finds an action whose name says it sends something out.
var outboundName = regexp.MustCompile(`notif\w*|e?mail\w*|sms|push|slack|webhook-?out\w*|sendmessage|message`)

func delivery(p ActionPlan) string {
	return fmt.Sprintf("%s leaves your system: no transaction takes it back, so it is never \"committed with\" the record. "+
		"Write it as an outbox entry (the message and its dedup id {key}_%s) with the COMPLETED record; a relay sends it and marks it sent. "+
		"At-least-once (the default here): a crash between the send and the mark sends it again, so the relay passes {key}_%s as the receiving service's idempotency key or message id where it takes one, and that service drops the repeat; where it takes none, a rare duplicate is the price. "+
		"At-most-once (mark sent, then send) loses the message on that crash instead: choose it only where a duplicate is worse than a loss.",
		strings.Join(p.Outbound, ", "), p.Name, p.Name)
}

// detection says where an action's duplicates are detected, from the
// detection-latency answer.
func detection(d *Document, p ActionPlan) string {
	if d.DetectionSync {
		return "synchronous: the claim is in the request path, before the effect; a duplicate is replayed or refused in the request itself"
	}
	var leaves []string
	if p.Provider != "" {
		leaves = append(leaves, "a payment")
	}
	leaves = append(leaves, p.Outbound...)
	for _, s := range p.Steps {
		if s.Remote {
			leaves = append(leaves, "the remote step "+s.Name)
		}
	}
	if len(leaves) > 0 {
		return fmt.Sprintf("in the request path all the same: its effect (%s) leaves your system, and a duplicate found %s later cannot be taken back", strings.Join(leaves, ", "), human(d.DetectionWithin))
	}
	return fmt.Sprintf("may be deferred (within %s): accept the request with its key (202), queue it, and let the consumer claim the key before it writes; the record still decides, only later, and the client reads the outcome by key. What may not be deferred: the claim before the effect's commit", human(d.DetectionWithin))
}

// fieldsGuide says how to choose an action's significant fields.
func fieldsGuide(kind string) string {
	switch kind {
	case "consumer":
		return "List the payload fields that decide what the message does (its target, its content, any amount): if one differs, it is another message. Leave out the broker's delivery metadata (delivery tag, offset, redelivered flag, timestamps): it differs between deliveries of one message."
	case "webhook":
		return "List the event's type and the id of the object it is about: the event id is already the key's intent. Leave out the delivery's timestamps, signatures and attempt counters."
	case "cron":
		return "List the job's parameters (the slot it runs for is already the key's intent); a job without parameters needs none beyond its name."
	}
	return "List the request fields your handler reads to decide what the effect is (its target, its content, any amount): if one differs, it is another request. Leave out what differs between retries of one intent: timestamps, trace and request ids, the key, headers, field order."
}

// DeriveIntentExample is a stable 64-hex example intent for an action.
func DeriveIntentExample(name string) string {
	return sha256hex("example " + name)
}

func providerRef(p, step string) ProviderRef {
	switch p {
	case "stripe":
		return ProviderRef{Provider: "Stripe", Step: step, Header: "Idempotency-Key", Value: "{key}_" + step + "_{attempt}", Derived: true}
	case "adyen":
		return ProviderRef{Provider: "Adyen", Step: step, Header: "reference + Idempotency-Key", Value: "{key}_" + step + " / sha256({key}_" + step + "_{attempt})[:64]", Derived: true}
	case "paypal":
		return ProviderRef{Provider: "PayPal", Step: step, Header: "PayPal-Request-Id", Value: "UUIDv5(ns, {key}_" + step + "_{attempt})", Derived: true}
	}
	return ProviderRef{Provider: "Bank transfer", Step: step, Header: "EndToEndId", Value: "base32(sha256({key}_" + step + "))[:35]", Derived: true}
}

func recovery(p ActionPlan, store string, goCode bool) []string {
	r := []string{
		"Crash before the claim: nothing recorded; the retry starts fresh.",
		fmt.Sprintf("Crash while PROCESSING: the lease ends within %s; the next retry reclaims it by compare-and-swap on lock_version and re-runs; the old holder can no longer complete (fencing).", human(p.LockTimeout)),
	}
	if p.Provider != "" {
		r = append(r,
			"Crash or timeout after the provider call: the payment intent was recorded PENDING before the call; the retry re-sends the SAME derived provider reference (the provider replays), or the reconciler looks it up and settles it; UNKNOWN is never turned into FAILED without proof.",
			"Provider declines: FAILED is stored with the decline and replayed to every retry.")
	} else if len(p.Outbound) > 0 {
		r = append(r, "Its local writes, if any: "+localEffects(store, goCode))
	} else {
		r = append(r, localEffects(store, goCode))
	}
	if len(p.Outbound) > 0 {
		r = append(r, "Outbound effects ("+strings.Join(p.Outbound, ", ")+") are not in that transaction: "+outboxWhere(store)+", sent by a relay at least once with the dedup id {key}_"+p.Name+" (section 5).")
	}
	if p.MultiStep() {
		r = append(r, "A later step fails permanently: the saga runs the completed steps' compensations in reverse order, each keyed {key}_{step}_compensate.")
	}
	r = append(r, "Transient error: the lease is ended at once (its end set to the store's now), the record is kept, and a retry re-drives with the same references.")
	return r
}

// derivedBy names the function that derives a server key's intent, for Go
// stacks (payonce's idempotency.DeriveIntent); other stacks read the rule
// itself: hex of the SHA-256 of the identifying fields, length-prefixed.
func derivedBy(a Answers) string {
	if a.Stack.IsGo() {
		return " (idempotency.DeriveIntent)"
	}
	return " (lowercase hex; each field length-prefixed before hashing, so that no two field lists share an encoding)"
}

// brokerIdentity is what names one message on the broker, and what its
// delivery semantics mean for the key (section 2).
func brokerIdentity(broker string) ([]string, string) {
	b := strings.ToLower(broker)
	switch {
	case strings.Contains(b, "kafka"):
		return []string{"topic", "partition", "offset"}, "Kafka records have no message id: topic/partition/offset names one record for the life of the topic, so a redelivery (a rebalance, a crash before the offset commit) is the same key. A producer's resend is a new offset: where a producer may resend, it sets a business id in a header and the key uses that instead. Offsets start again when a topic is deleted and recreated: never recreate a topic within the retention."
	case strings.Contains(b, "rabbit") || strings.Contains(b, "amqp"):
		return []string{"message id"}, "RabbitMQ assigns no message id: the producer sets properties.message_id once per message (a UUIDv4) and keeps it on a republish; the delivery tag counts deliveries on one channel and is never an identity. A message without a message_id goes to the dead-letter queue, never through unkeyed. Delivery is at least once: a consumer that dies before its ack gets the message redelivered (redelivered=true) to any consumer."
	case strings.Contains(b, "sqs"):
		return []string{"business id in the body"}, "SQS delivers at least once: a message comes back after its visibility timeout if not deleted, and standard queues may rarely deliver it twice. Its MessageId is new on every send, so a producer's resend gets another one; MessageDeduplicationId exists only on FIFO queues and drops resends within 5 minutes only. The key therefore comes from a business id the producer puts in the body, one per intent."
	case strings.Contains(b, "nats"):
		return []string{"Nats-Msg-Id header"}, "JetStream drops a publish whose Nats-Msg-Id it saw within the stream's duplicate window (2 minutes by default); the consumer still sees redeliveries (an ack lost, AckWait passed), so the key is derived from the same Nats-Msg-Id."
	}
	return []string{"message id"}, ""
}

// uniqueBy is section 2(c) for a server key: the hash of the identifying
// fields is as unique as the fields are, whatever its 256 bits.
func uniqueBy(kind string, ids []string, broker string) string {
	f := strings.Join(ids, " + ")
	switch {
	case kind == "cron":
		return "one key per job and scheduled slot: as many keys as slots (a slot a minute is 1,440 a day)"
	case kind == "webhook":
		return "as unique as the provider's event ids: one per event, reused by the provider on every resend"
	case strings.Contains(f, "offset"):
		return "as unique as topic/partition/offset: one per record while the topic lives"
	case strings.Contains(f, "message id") && strings.Contains(strings.ToLower(broker), "rabbit"):
		return "as unique as the producer's message_id: a UUIDv4 (122 random bits) per message"
	}
	return "as unique as " + f + ": the producer must use one value per intent (a business id), never a value reused across intents"
}
