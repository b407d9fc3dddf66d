package reconcile_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/reconcile"
)

// An item's age is in seconds in JSON, as its name says and as the CSV
// gives it, and reads back the same.
func TestItemJSONAgeInSeconds(t *testing.T) {
	t.Parallel()
	in := reconcile.Item{Kind: reconcile.KindAmountDiffers, IntentKey: "k", Age: 90 * time.Second}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"age_seconds":90`) || strings.Count(string(b), "age_seconds") != 1 {
		t.Fatalf("JSON %s, want one age_seconds of 90", b)
	}
	var out reconcile.Item
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Age != in.Age || out.IntentKey != "k" || out.Kind != in.Kind {
		t.Fatalf("read back %+v, want %+v", out, in)
	}
}
