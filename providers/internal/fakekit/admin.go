package fakekit

import (
	"encoding/json"
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
