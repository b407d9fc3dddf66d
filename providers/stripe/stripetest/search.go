package stripetest

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// searchResult is Stripe's envelope of a search answer.
type searchResult[T any] struct {
	Object   string  `json:"object"` // "search_result"
	Data     []T     `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
	URL      string  `json:"url"`
}

// searchPageCursor prefixes a next_page cursor; what follows is the id of the last object of the
// page. Stripe's cursors are opaque; so should callers treat these.
const searchPageCursor = "stripetest_after:"

// searchPaymentIntents serves GET /v1/payment_intents/search: query (required; see
// parseSearchQuery), limit (1..100, default 10) and page (a previous answer's next_page).
// Results are newest first. A PaymentIntent is visible only once it was created at least
// Config.SearchLag ago on Config.Clock: Stripe's search index lags behind its writes.
func (s *Server) searchPaymentIntents(c *call) (*response, bool) {
	f := c.form
	if !f.Has("query") { // required (https://docs.stripe.com/api/payment_intents/search; see required.go)
		return missing("query")
	}
	q, err := parseSearchQuery(f.Get("query"))
	if err != nil {
		return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Param: "query",
			Message: "Invalid search query: " + err.Error()}), false
	}
	limit, bad := listLimit(f)
	if bad != nil {
		return bad, false
	}

	newestFirst := slices.Clone(s.order)
	slices.Reverse(newestFirst)
	if page := f.Get("page"); page != "" {
		after, ok := strings.CutPrefix(page, searchPageCursor)
		i := slices.IndexFunc(newestFirst, func(pi *paymentIntent) bool { return pi.ID == after })
		if !ok || i < 0 {
			return errorResponse(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: "parameter_invalid_string",
				Param: "page", Message: fmt.Sprintf("Invalid page: %q is not a next_page value of this search.", page)}), false
		}
		newestFirst = newestFirst[i+1:]
	}

	// Unix seconds: created is whole seconds, so the lag is measured from the start of the
	// creation second.
	indexedUpTo := s.clock().Add(-s.searchLag).Unix()
	out := searchResult[*paymentIntent]{Object: "search_result", Data: []*paymentIntent{}, URL: "/v1/payment_intents/search"}
	for _, pi := range newestFirst {
		if pi.Created > indexedUpTo || !q.matches(pi) {
			continue
		}
		if int64(len(out.Data)) == limit {
			out.HasMore = true
			next := searchPageCursor + out.Data[len(out.Data)-1].ID
			out.NextPage = &next
			break
		}
		out.Data = append(out.Data, pi)
	}
	return jsonResponse(http.StatusOK, out), true
}

// searchQuery is a parsed query of Stripe's search query language, as far as the fake speaks it.
type searchQuery struct {
	clauses []searchClause
	or      bool // clauses are ORed; else ANDed
}

type searchClause struct {
	negate bool
	field  string // "metadata", "status", "currency", "amount", "created"
	key    string // the metadata key
	op     string // ":", ">", ">=", "<", "<="
	value  string
	number int64 // value, for amount and created
}

func (q searchQuery) matches(pi *paymentIntent) bool {
	for _, c := range q.clauses {
		if c.matches(pi) == q.or {
			return q.or
		}
	}
	return !q.or
}

func (c searchClause) matches(pi *paymentIntent) bool {
	var ok bool
	switch c.field {
	case "metadata":
		v, present := pi.Metadata[c.key]
		// Stripe matches metadata values exactly but case-insensitively.
		ok = present && strings.EqualFold(v, c.value)
	case "status":
		ok = strings.EqualFold(pi.Status, c.value)
	case "currency":
		ok = strings.EqualFold(pi.Currency, c.value)
	case "amount":
		ok = compare(pi.Amount, c.op, c.number)
	case "created":
		ok = compare(pi.Created, c.op, c.number)
	}
	return ok != c.negate
}

func compare(a int64, op string, b int64) bool {
	switch op {
	case ">":
		return a > b
	case ">=":
		return a >= b
	case "<":
		return a < b
	case "<=":
		return a <= b
	}
	return a == b
}

// parseSearchQuery parses the subset of Stripe's search query language the fake serves:
//
//   - clauses field:'value' (or "value"), with backslash escapes inside the quotes;
//   - fields metadata['key'] (or metadata["key"]), status and currency (exact, case-insensitive
//     matches, quoted values), amount and created (integers, with :, >, >=, <, <=);
//   - a clause negated by a leading '-';
//   - clauses joined by AND or OR (case-insensitive; not both in one query), or by a space,
//     which means AND.
//
// Anything else (substring matching with ~, other fields, parentheses) is an error naming what
// and where.
func parseSearchQuery(s string) (searchQuery, error) {
	p := &queryParser{s: s}
	var q searchQuery
	var sawAnd bool
	p.skipSpace()
	if p.eof() {
		return q, fmt.Errorf("the query is empty")
	}
	for !p.eof() {
		if len(q.clauses) > 0 {
			start := p.i
			switch word := p.word(); {
			case strings.EqualFold(word, "AND"):
				sawAnd = true
			case strings.EqualFold(word, "OR"):
				q.or = true
			default:
				p.i = start // juxtaposed clauses: AND
				sawAnd = true
			}
			if sawAnd && q.or {
				return q, fmt.Errorf("AND and OR cannot be combined in one query (at position %d)", start)
			}
			p.skipSpace()
			if p.eof() {
				return q, fmt.Errorf("the query ends after a boolean operator")
			}
		}
		c, err := p.clause()
		if err != nil {
			return q, err
		}
		q.clauses = append(q.clauses, c)
		p.skipSpace()
	}
	return q, nil
}

type queryParser struct {
	s string
	i int
}

func (p *queryParser) eof() bool { return p.i >= len(p.s) }

func (p *queryParser) skipSpace() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

// word consumes a run of letters.
func (p *queryParser) word() string {
	start := p.i
	for !p.eof() && isFieldByte(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

func isFieldByte(b byte) bool {
	return b == '_' || b == '.' || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') || ('0' <= b && b <= '9')
}

func (p *queryParser) clause() (searchClause, error) {
	var c searchClause
	start := p.i
	if p.s[p.i] == '-' {
		c.negate = true
		p.i++
	}
	c.field = p.word()
	switch c.field {
	case "":
		return c, fmt.Errorf("expected a field name at position %d", p.i)
	case "metadata":
		if p.eof() || p.s[p.i] != '[' {
			return c, fmt.Errorf("expected metadata['key'] at position %d", start)
		}
		p.i++
		key, err := p.quoted()
		if err != nil {
			return c, err
		}
		if p.eof() || p.s[p.i] != ']' {
			return c, fmt.Errorf("expected ']' after the metadata key at position %d", p.i)
		}
		p.i++
		c.key = key
	case "status", "currency", "amount", "created":
	default:
		return c, fmt.Errorf("field %q is not supported (stripetest serves metadata, status, currency, amount and created)", c.field)
	}

	opAt := p.i
	for _, op := range []string{">=", "<=", ":", ">", "<", "~"} {
		if strings.HasPrefix(p.s[p.i:], op) {
			c.op = op
			p.i += len(op)
			break
		}
	}
	switch {
	case c.op == "":
		return c, fmt.Errorf("expected an operator (:, >, >=, <, <=) after %q at position %d", c.field, opAt)
	case c.op == "~":
		return c, fmt.Errorf("substring matching (~) is not supported by stripetest (at position %d)", opAt)
	case c.op != ":" && c.field != "amount" && c.field != "created":
		return c, fmt.Errorf("operator %q applies to numeric fields only, not %q (at position %d)", c.op, c.field, opAt)
	}

	valueAt := p.i
	if !p.eof() && (p.s[p.i] == '\'' || p.s[p.i] == '"') {
		v, err := p.quoted()
		if err != nil {
			return c, err
		}
		c.value = v
	} else {
		for !p.eof() && p.s[p.i] != ' ' && p.s[p.i] != '\t' && p.s[p.i] != '\n' {
			p.i++
		}
		c.value = p.s[valueAt:p.i]
		if c.value == "" {
			return c, fmt.Errorf("expected a value for %q at position %d", c.field, valueAt)
		}
		if c.field != "amount" && c.field != "created" {
			return c, fmt.Errorf("the value of %q must be quoted (at position %d)", c.field, valueAt)
		}
	}
	if c.field == "amount" || c.field == "created" {
		n, err := strconv.ParseInt(c.value, 10, 64)
		if err != nil {
			return c, fmt.Errorf("the value of %q must be an integer, got %q (at position %d)", c.field, c.value, valueAt)
		}
		c.number = n
	}
	return c, nil
}

// quoted consumes a '...' or "..." string; a backslash escapes the next character.
func (p *queryParser) quoted() (string, error) {
	start := p.i
	if p.eof() || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", fmt.Errorf("expected a quoted string at position %d", start)
	}
	quote := p.s[p.i]
	p.i++
	var b strings.Builder
	for !p.eof() {
		ch := p.s[p.i]
		switch {
		case ch == '\\':
			if p.i+1 >= len(p.s) {
				return "", fmt.Errorf("unterminated string starting at position %d", start)
			}
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		case ch == quote:
			p.i++
			return b.String(), nil
		default:
			b.WriteByte(ch)
			p.i++
		}
	}
	return "", fmt.Errorf("unterminated string starting at position %d", start)
}

// validateSearch checks the search fields of c.
func (c *Config) validateSearch() error {
	if c.SearchLag < 0 {
		return fmt.Errorf("Config.SearchLag must not be negative, got %v", c.SearchLag)
	}
	return nil
}
