package ledgerbench_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/payonce/payonce/ledger/ledgerbench"
	"github.com/payonce/payonce/pgtest"
)

// TestRun keeps the benchmark compiling and working; it asserts nothing
// about speed.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := ledgerbench.Run(ctx, pgtest.BaseURL(t), 4, time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.HotPostingsPerSec <= 0 || res.DistinctPostingsPerSec <= 0 || res.HotP99 < res.HotP50 {
		t.Fatalf("Run = %+v", res)
	}
	t.Log(res)
}

func TestBalanceRead(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := ledgerbench.BalanceRead(ctx, pgtest.BaseURL(t), 20_000)
	if err != nil {
		t.Fatalf("BalanceRead: %v", err)
	}
	t.Log(res)
}

// BenchmarkBalanceRead measures the million-posting balance read:
//
//	go run ./lab/cmd/withpg -durable -- go test -run '^$' -bench BalanceRead ./ledger/ledgerbench
//
// LEDGERBENCH_POSTINGS overrides the number of postings.
func BenchmarkBalanceRead(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("LEDGERBENCH_POSTINGS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("LEDGERBENCH_POSTINGS: %v", err)
		}
	}
	for b.Loop() {
		res, err := ledgerbench.BalanceRead(context.Background(), pgtest.BaseURL(b), n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.WarmP50.Microseconds())/1000, "warm-p50-ms")
		b.ReportMetric(float64(res.WarmP99.Microseconds())/1000, "warm-p99-ms")
		b.ReportMetric(float64(res.Cold.Microseconds())/1000, "cold-ms")
		b.Log(res)
	}
}

// BenchmarkHotDistinct runs the hot/distinct comparison as `make bench`
// does, 8 goroutines:
//
//	go run ./lab/cmd/withpg -durable -- go test -run '^$' -bench HotDistinct ./ledger/ledgerbench
//
// LEDGERBENCH_DURATION overrides the 10s per mode.
func BenchmarkHotDistinct(b *testing.B) {
	d := 10 * time.Second
	if s := os.Getenv("LEDGERBENCH_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			b.Fatalf("LEDGERBENCH_DURATION: %v", err)
		}
	}
	for b.Loop() {
		res, err := ledgerbench.Run(context.Background(), pgtest.BaseURL(b), 8, d)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(res.Ratio(), "hot/distinct")
		b.ReportMetric(res.HotPostingsPerSec, "hot-postings/s")
		b.ReportMetric(res.DistinctPostingsPerSec, "distinct-postings/s")
		b.Log(res)
	}
}
