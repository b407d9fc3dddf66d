package fakekit_test

import (
	"testing"

	"github.com/payonce/payonce/providers/internal/fakekit"
)

func TestJSONFieldsHas(t *testing.T) {
	t.Parallel()
	f := fakekit.ReadJSONFields([]byte(`{"a":{"b":"x","zero":0,"empty":"","null":null,"obj":{}},"s":"v","arr":[1]}`))
	for path, want := range map[string]bool{
		"a": true, "a.b": true, "a.zero": true, "a.obj": true, "s": true, "arr": true,
		"a.empty": false, "a.null": false, "a.missing": false, "missing": false, "s.x": false, "arr.0": false, "a.b.c": false,
	} {
		if got := f.Has(path); got != want {
			t.Errorf("Has(%q) = %v, want %v", path, got, want)
		}
	}
	if fakekit.ReadJSONFields([]byte(`not json`)).Has("a") {
		t.Error("a body that is not JSON has fields")
	}
}
