package keyscan_test

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/lab/internal/keyscan"
)

// A key is found inside longer strings, the longest at a position wins,
// and Redact leaves only hashes.
func TestSetFindsAndRedacts(t *testing.T) {
	t.Parallel()
	s := keyscan.NewSet()
	s.Add("order-1", "order-12", "", "cart-9")
	if k, ok := s.Find("ref cus_1_charge_order-12_charge_0 failed"); !ok || k != "order-12" {
		t.Fatalf("Find: %q %v, want the longest key at its position", k, ok)
	}
	if _, ok := s.Find("order-" + idempotency.ShortHash("order-1")); ok {
		t.Fatal("a short hash was taken for a key")
	}
	got := s.Redact("a order-1, b cart-9_reserve.")
	want := "a key#" + idempotency.ShortHash("order-1") + ", b key#" + idempotency.ShortHash("cart-9") + "_reserve."
	if got != want {
		t.Fatalf("Redact: %q, want %q", got, want)
	}
	if s.Len() != 3 {
		t.Fatalf("Len %d, want 3 (the empty key is ignored)", s.Len())
	}
}

// What a worker writes to its sink (records at every level, spans with
// their attributes and events) is read back by ScanFile, each line
// counted as a record or a span, and a key in any of them found.
func TestSinkScannedBack(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "worker-1.jsonl")
	sink, err := keyscan.OpenSink(path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sink.Logger.Debug("quiet", "key", idempotency.ShortHash("order-7"))
	sink.Logger.Error("loud", "err", "order order-7 failed")
	_, span := sink.TracerProvider.Tracer("t").Start(context.Background(), "payments.charge")
	span.AddEvent("retry", trace.WithAttributes(attribute.String("reference", "cus_1_charge_order-7_charge_0")))
	span.End()
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	keys := keyscan.NewSet()
	keys.Add("order-7")
	c := keyscan.NewChecker(keys)
	if err := c.ScanFile(path, "worker"); err != nil {
		t.Fatal(err)
	}
	records, spans, texts := c.Scanned()
	leaks := c.Leaks()
	if records != 2 || spans != 1 || texts != 0 || len(leaks) != 2 {
		t.Fatalf("%d records, %d spans, %d texts, leaks %+v; want 2, 1, 0 and 2 leaks", records, spans, texts, leaks)
	}
	if leaks[0].Kind != keyscan.Record || leaks[1].Kind != keyscan.Span || strings.Contains(leaks[1].Text, "order-7") {
		t.Fatalf("leaks %+v: want the error record and the span, redacted", leaks)
	}
}
