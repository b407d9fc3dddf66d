package fakekit

import (
	"bytes"
	"encoding/json"
	"strings"
)

// JSONFields is a JSON request body read for presence checks: which fields a request carries,
// whatever their types (a fake decodes the body into its own types separately).
type JSONFields struct{ root any }

// ReadJSONFields reads body. A body that is not JSON reads as an empty object: the fake's own
// decoding reports it.
func ReadJSONFields(body []byte) JSONFields {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		v = nil
	}
	return JSONFields{v}
}

// Has reports whether the dotted path ("amount.currency") names a value that is present, not
// null and, for a string, not empty: what a provider's "required" means. Each segment must be an
// object's member.
func (f JSONFields) Has(path string) bool {
	v := f.root
	for _, seg := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = obj[seg]; !ok {
			return false
		}
	}
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	}
	return true
}
