package design

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var otherStacks = []string{"django-mysql-rabbitmq", "express-dynamodb-sqs", "fastapi-postgres-stripe", "spring-postgres-kafka-adyen"}

// TestDesignOtherStacksHoldNoPayonceInstruction: a document for a stack
// that does not run payonce's Go packages gives no instruction its
// engineers cannot follow: no payonce command, instrument, rule file or
// Go API; its monitoring, alert rules and runbook are its own.
func TestDesignOtherStacksHoldNoPayonceInstruction(t *testing.T) {
	t.Parallel()
	goAPI := regexp.MustCompile(`\b(idempotency|payments|pgstore|redisstore|dynamostore|inbox|reconcile|saga|providers)\.[A-Z][A-Za-z]+`)
	cli := regexp.MustCompile(`payonce (stuck|release|prune|reconcile|resolve|report|migrate)`)
	for _, name := range otherStacks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d, out := answersDoc(t, "testdata/stacks/"+name+".yaml", nil)
			if d.Answers.Stack.IsGo() {
				t.Fatalf("%s is a Go stack", name)
			}
			for i, line := range strings.Split(out, "\n") {
				low := strings.ToLower(line)
				if strings.Contains(low, "payonce") && !strings.Contains(low, "payonce design") {
					t.Errorf("line %d names payonce: %.200s", i+1, line)
				}
				if m := goAPI.FindString(line); m != "" && !strings.Contains(line, "import ") {
					t.Errorf("line %d names payonce's Go API %s: %.200s", i+1, m, line)
				}
				if m := cli.FindString(line); m != "" {
					t.Errorf("line %d gives a payonce command %q", i+1, m)
				}
			}
			for _, want := range []string{"idempotency_requests_total", "IdempotencyFencedCompletion", "idempotency.rules.yml"} {
				if !strings.Contains(out, want) {
					t.Errorf("no %s in the document", want)
				}
			}
		})
	}
	// A Go stack still gets payonce's own instruments, rules and CLI.
	_, out := answersDoc(t, "testdata/stacks/go-chi-redis.yaml", nil)
	for _, want := range []string{"payonce stuck", "payonce-idempotency.rules.yml", "idempotency.ComposeKey"} {
		if !strings.Contains(out, want) {
			t.Errorf("Go document: no %q", want)
		}
	}
}

// TestDesignStackRulesPromtool: D7 of every other stack is a rule file
// promtool accepts.
func TestDesignStackRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: .ci/run installs Debian's prometheus package (apt-get install prometheus)")
	}
	dir := t.TempDir()
	var files []string
	for _, name := range otherStacks {
		d, _ := answersDoc(t, "testdata/stacks/"+name+".yaml", nil)
		f := filepath.Join(dir, name+".rules.yml")
		if err := os.WriteFile(f, []byte(stackRules(d)), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestDesignStackRunbookReleaseIsFenced: the runbook's release moves the
// lock version on, conditioned on the version read, on every store: a
// holder still running is fenced, and a release of a record another
// operator already released changes nothing.
func TestDesignStackRunbookReleaseIsFenced(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{StorePostgres, StoreMySQL, StoreDynamo, StoreMongo} {
		c := storeCommands(kind, 0)
		if !regexp.MustCompile(`lock_version = lock_version \+ 1|v = v \+ :one|\$inc: \{ v: 1 \}`).MatchString(c.release) {
			t.Errorf("%s: release does not move the version on: %s", kind, c.release)
		}
		if !regexp.MustCompile(`lock_version = (\$3|\?)|v = :seen|v: seen`).MatchString(c.release) {
			t.Errorf("%s: release is not conditioned on the version read: %s", kind, c.release)
		}
		if strings.Contains(strings.ToUpper(c.release), "DELETE") {
			t.Errorf("%s: release deletes: %s", kind, c.release)
		}
	}
}

// TestDesignBrokerShapesConsumerKeys: the broker answer decides what a
// consumer's key is derived from and what section 2 says of its delivery,
// and a derived key's uniqueness rests on its fields, not on random bits.
func TestDesignBrokerShapesConsumerKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file, action string
		want         []string
		not          []string
	}{
		{"spring-postgres-kafka-adyen", "settleOrder", []string{"sha256 of topic + partition + offset", "Kafka records have no message id", "one per record while the topic lives"}, []string{"sha256 of message id"}},
		{"django-mysql-rabbitmq", "sendConfirmation", []string{"properties.message_id", "delivery tag", "UUIDv4 (122 random bits) per message"}, nil},
		{"express-dynamodb-sqs", "fulfilOrder", []string{"MessageDeduplicationId exists only on FIFO queues", "visibility timeout", "as unique as order_id"}, nil},
	} {
		d, out := answersDoc(t, "testdata/stacks/"+c.file+".yaml", nil)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q", c.file, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(out, w) {
				t.Errorf("%s: %q", c.file, w)
			}
		}
		for _, x := range d.Actions {
			if x.Name == c.action && (x.UniqueBy == "" || x.KeySource != "server") {
				t.Errorf("%s: %s: key source %s, uniqueness %q", c.file, x.Name, x.KeySource, x.UniqueBy)
			}
		}
	}
}

// TestDesignPostgresHolderStatementsUseThePrimaryKey: on PostgreSQL, the
// statements that act on one holder's record say "not finished", never
// AND status = 'PROCESSING', which matches the orphan-lock partial index
// of the reference DDL and lets the planner read all of it (pgstore's
// TestHolderPlansUseThePrimaryKey shows the plans).
func TestDesignPostgresHolderStatementsUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"fastapi-postgres-stripe", "spring-postgres-kafka-adyen"} {
		d, out := answersDoc(t, "testdata/stacks/"+name+".yaml", nil)
		if d.Store != StorePostgres {
			t.Fatalf("%s: store %q", name, d.Store)
		}
		if n := strings.Count(out, "AND status = 'PROCESSING'"); n != 0 {
			t.Errorf("%s: %d statements say AND status = 'PROCESSING'", name, n)
		}
		if !strings.Contains(out, "status NOT IN ('COMPLETED', 'FAILED')") {
			t.Errorf("%s: no holder statement says not finished", name)
		}
	}
}
