package design

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goBlocks returns the text of section id's Go code blocks.
func goBlocks(d *Document, id string) []string {
	var out []string
	for _, b := range sectionOf(d, id).Blocks {
		if b.Kind == "code" && b.Lang == "go" {
			out = append(out, b.Text)
		}
	}
	return out
}

// TestDesignGoDeliverablesCompile writes the Go deliverables (D3, D4, D6) of
// Go stacks into a module that uses payonce from this repository, and vets
// it: the code the document shows compiles against payonce's real API.
func TestDesignGoDeliverablesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds generated code with the go command")
	}
	t.Parallel()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go command in GOROOT/bin nor on PATH: the generated Go cannot be checked (%v)", err)
		}
	}
	kafkaGo := func(a *Answers) {
		a.Stack.Language, a.Stack.Framework = "Go", "chi"
	}
	cases := []struct {
		name, file string
		edit       func(*Answers)
	}{
		{"checkout", "testdata/checkout.yaml", nil},
		{"go-chi-redis", "testdata/stacks/go-chi-redis.yaml", nil},
		{"go-chi-postgres-kafka-adyen", "testdata/stacks/spring-postgres-kafka-adyen.yaml", kafkaGo},
		{"go-chi-redis-kafka", "testdata/stacks/go-chi-redis.yaml", func(a *Answers) {
			a.Stack.Broker = "Kafka"
			a.Actions = append(a.Actions, Action{Name: "settle", Kind: "consumer", Duration: "2s", Fields: []string{"order_id", "amount"}})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, _ := answersDoc(t, tc.file, tc.edit)
			d3, d4, d6 := goBlocks(d, "d3-middleware"), goBlocks(d, "d4-fingerprint"), goBlocks(d, "d6-test-suite")
			if len(d3) != 1 || len(d4) != 1 || len(d6) != 1 {
				t.Fatalf("want one Go file in D3, D4 and D6, got %d, %d and %d", len(d3), len(d4), len(d6))
			}
			code := d3[0]
			for _, bad := range []string{"msg.ID", "Fields: []string{}"} {
				if strings.Contains(code, bad) {
					t.Errorf("D3 has %q", bad)
				}
			}
			var want []string
			switch tc.name {
			case "checkout":
				want = []string{"providers.FromEnv(os.Getenv)", "client.Charge(", "client.Refund(", "in.HandleTx("}
				if strings.Contains(code, `Pattern: "POST /charges"`) {
					t.Error("payments go through the generic middleware")
				}
			case "go-chi-redis":
				want = []string{"redisstore.New(rdb, nil)", `Pattern: "POST /transfers"`}
				if strings.Contains(code, "payments.") {
					t.Error("a stack without providers gets payments code")
				}
			case "go-chi-redis-kafka":
				// Redis is not transactional with the writes: the executor,
				// keyed by the record's identity.
				want = []string{"exec.Do(ctx", "idempotency.ComposeKey(tenant, \"settle\", inbox.MessageID(topic, strconv.Itoa(int(partition)), strconv.FormatInt(offset, 10)))"}
			default:
				want = []string{"in.HandleTx(", "inbox.MessageID(topic, strconv.Itoa(int(partition)), strconv.FormatInt(offset, 10))", `Provider: "adyen"`, "client.Charge("}
			}
			for _, w := range want {
				if !strings.Contains(code, w) {
					t.Errorf("D3 lacks %q:\n%s", w, code)
				}
			}
			dir := t.TempDir()
			files := map[string]string{
				"go.mod":              "module example.com/yourservice\n\ngo 1.26.0\n",
				"go.work":             "go 1.26.0\n\nuse (\n\t.\n\t" + root + "\n\t" + filepath.Join(root, "idempotency/redisstore") + "\n\t" + filepath.Join(root, "idempotency/dynamostore") + "\n)\n",
				"yourservice.go":      d3[0] + "\n",
				"fingerprint.go":      d4[0] + "\n",
				"yourservice_test.go": d6[0],
			}
			for n, text := range files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, goBin, "vet", "./...")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=", "GOPROXY=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the generated Go does not build: %v\n%s\n--- yourservice.go\n%s", err, out, d3[0])
			}
		})
	}
}
