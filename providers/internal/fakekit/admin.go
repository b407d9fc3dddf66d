package fakekit

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// AdminPrefix is the path prefix of a fake's unauthenticated admin endpoints.
const AdminPrefix = "/_fake/"

// IsAdmin reports whether r is for an admin endpoint.
func IsAdmin(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, AdminPrefix) }

// AdminGet answers GET /_fake/<name>?query with a value to encode as JSON, or an error telling
// what the query lacks (answered 400).
type AdminGet func(q url.Values) (any, error)

// ServeAdmin serves GET AdminPrefix+name from gets[name] as JSON; other paths get 404 and other
// methods 405.
func ServeAdmin(w http.ResponseWriter, r *http.Request, gets map[string]AdminGet) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	get, ok := gets[strings.TrimPrefix(r.URL.Path, AdminPrefix)]
	if !ok || !IsAdmin(r) {
		http.NotFound(w, r)
		return
	}
	v, err := get(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Param is one way to query an admin endpoint: a query that has the parameter Name is answered
// by Answer.
type Param struct {
	Name   string
	Answer func(q url.Values) any
}

// ByParam returns an AdminGet that answers a query with the first of params whose Name the
// query has, and with the error need when it has none of them.
func ByParam(need string, params ...Param) AdminGet {
	return func(q url.Values) (any, error) {
		for _, p := range params {
			if q.Has(p.Name) {
				return p.Answer(q), nil
			}
		}
		return nil, errors.New(need)
	}
}

// Value returns an AdminGet that answers get(), whatever the query.
func Value[T any](get func() T) AdminGet {
	return func(url.Values) (any, error) { return get(), nil }
}

// Count returns how many of xs match: the admin counts of objects by key or reference.
func Count[T any](xs []T, match func(T) bool) int {
	n := 0
	for _, x := range xs {
		if match(x) {
			n++
		}
	}
	return n
}

// Add updates m[k], the zero V if absent, with add: a per-currency total, say.
func Add[K comparable, V any](m map[K]V, k K, add func(v *V)) {
	v := m[k]
	add(&v)
	m[k] = v
}
