package designkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/payonce/payonce/idempotency/redisstore/redistest"
	"github.com/payonce/payonce/pgtest"
)

// goScenarios are the seed's eight scenarios, as D6's Go tests name them
// (Test<Action><Scenario>).
var goScenarios = []string{
	"ReplaysSameKey", "ConcurrentSameKeyOneEffect", "DifferentFieldsRefused", "VolatileFieldReplayed",
	"HolderKilledReclaimed", "ExpiredKeyIsNew", "OtherScopeIsolated", "StoreDownFailsClosed",
}

// goInboxScenarios are the scenarios D6 runs for a consumer that the
// inbox handles on PostgreSQL, goExecScenarios for one the executor
// handles on another store (the kit's file says why the others are not
// generated).
var (
	goInboxScenarios = []string{
		"ReplaysSameKey", "ConcurrentSameKeyOneEffect", "DifferentFieldsRefused", "HolderKilledReclaimed", "ExpiredKeyIsNew",
		"StoreDownFailsClosed",
	}
	goExecScenarios = append(goInboxScenarios, "OtherScopeIsolated")
)

// TestGoKits builds the Go deliverables of Go stacks (D3, D4 and D6, as
// `payonce design --code` writes them) in a module that uses payonce from
// this repository, and runs D6's scenario tests against the answers'
// store: a real Redis for go-chi-redis, a fresh PostgreSQL schema for
// payonce's own checkout. Every scenario of every route Protect guards
// must pass; none may be skipped.
func TestGoKits(t *testing.T) {
	r := root(t)
	design := filepath.Join(r, "cmd", "payonce", "internal", "design", "testdata")
	cases := []struct {
		name, answers     string
		routes, consumers []string
		consumerTests     []string
		env               func(t *testing.T) []string
	}{
		{"go-chi-redis", filepath.Join(design, "stacks", "go-chi-redis.yaml"), []string{"CreateTransfer", "SendNotification"}, nil, nil,
			func(t *testing.T) []string { return []string{"REDIS_URL=redis://" + redistest.Addr(t) + "/0"} }},
		{"go-redis-worker", filepath.Join(design, "stacks", "go-redis-worker.yaml"), []string{"RequestPayout"}, []string{"SettlePayout"}, goExecScenarios,
			func(t *testing.T) []string { return []string{"REDIS_URL=redis://" + redistest.Addr(t) + "/0"} }},
		{"checkout-postgres", filepath.Join(design, "checkout.yaml"), []string{"Inventory"}, []string{"Webhook"}, append(goInboxScenarios, "OtherScopeIsolated"),
			func(t *testing.T) []string { return []string{"DATABASE_URL=" + pgtest.SchemaURL(t)} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kit := generateFrom(t, tc.answers)
			files := map[string]string{
				"go.mod": "module example.com/yourservice\n\ngo 1.26.0\n",
				"go.work": "go 1.26.0\n\nuse (\n\t.\n\t" + r + "\n\t" + filepath.Join(r, "idempotency", "redisstore") +
					"\n\t" + filepath.Join(r, "idempotency", "dynamostore") + "\n)\n",
			}
			for n, text := range files {
				if err := os.WriteFile(filepath.Join(kit, n), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env := append([]string{"GOWORK=" + filepath.Join(kit, "go.work"), "GOFLAGS=", "GOPROXY=off"}, tc.env(t)...)
			goRun(t, kit, env, "vet", "./...")
			out := goRun(t, kit, env, "test", "-race", "-count=1", "-v", "./...")
			for _, rt := range tc.routes {
				for _, sc := range goScenarios {
					if !strings.Contains(out, "--- PASS: Test"+rt+sc+" ") {
						t.Errorf("Test%s%s did not pass:\n%s", rt, sc, out)
					}
				}
			}
			for _, c := range tc.consumers {
				for _, sc := range tc.consumerTests {
					if !strings.Contains(out, "--- PASS: Test"+c+sc+" ") {
						t.Errorf("Test%s%s did not pass:\n%s", c, sc, out)
					}
				}
			}
			for _, m := range regexp.MustCompile(`--- SKIP: (\S+)`).FindAllStringSubmatch(out, -1) {
				if m[1] != "TestHelperHolder" && !strings.HasPrefix(m[1], "TestHelperConsumer") {
					t.Errorf("%s was skipped:\n%s", m[1], out)
				}
			}
			t.Logf("go test: %d passed", strings.Count(out, "--- PASS: "))
		})
	}
}

// goRun runs the go command in dir, bounded in time, and fails the test
// with its output when it fails.
func goRun(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command in GOROOT/bin nor on PATH: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}
