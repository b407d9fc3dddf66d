package design

import (
	"strings"
	"testing"
)

func TestNodeKit(t *testing.T) {
	d, doc := stackDoc(t, "express-dynamodb-sqs") // stackDoc also runs Check
	if !strings.Contains(doc, "src/store.ts") || strings.Contains(doc, "Adaptation needed") {
		t.Error("the document does not show the kit's files in D3..D6")
	}
	k := KitOf(d)
	if k == nil || k.Stack != "typescript-express" {
		t.Fatalf("KitOf(express-dynamodb-sqs) = %v, want the typescript-express kit", k)
	}
	files := map[string]string{}
	for _, f := range k.Files() {
		files[f.Path] = f.Text
	}
	for path, wants := range map[string][]string{
		"src/config.ts": {`createOrder: { name: "createOrder", fields: ["cart_id", "amount", "currency"], leaseMs: 30_000 }`,
			`fulfilOrder: { name: "fulfilOrder", fields: ["order_id", "warehouse"], leaseMs: 135_000, identifying: ["order_id"] }`,
			"retentionMs = 345_600_000", "skewMs = 2_000"},
		"src/store.ts":       {"attribute_not_exists(pk)", "st = :processing AND v = :seen AND lu < :now_minus_skew", "st = :processing AND v = :mine", "ConsistentRead: true", "TransactWriteItems"},
		"src/fingerprint.ts": {"timingSafeEqual"},
		"src/idempotency.ts": {"Idempotent-Replayed", "Retry-After"},
		"src/sqsConsumer.ts": {"MessageDeduplicationId", "FIFO"},
		"src/cleanup.ts":     {"ea <= :now"},
		"test/kit.test.ts":   {"actions.createOrder"},
		"test/sqs.test.ts":   {"actions.fulfilOrder"},
	} {
		text, ok := files[path]
		if !ok {
			t.Errorf("kit has no %s", path)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
	for _, f := range k.Files() {
		if strings.Contains(f.Text, "{{") {
			t.Errorf("%s has an unfilled placeholder", f.Path)
		}
	}
	for _, other := range []string{"django-mysql-rabbitmq", "fastapi-postgres-stripe", "spring-postgres-kafka-adyen", "go-chi-redis"} {
		od, _ := stackDoc(t, other)
		if nodeKit(od) != nil {
			t.Errorf("nodeKit(%s) returned a kit", other)
		}
	}
	// Another document's decisions reach the config: a changed answer changes the code.
	a := d.Answers
	a.Actions = append([]Action(nil), a.Actions...)
	a.Actions[0].Fields = []string{"sku", "qty"}
	a.Actions[0].Duration = "20s"
	a.Retention = "10d"
	d2, err := Build(a, nil, d.Generated)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(d2)
	for _, w := range []string{`fields: ["sku", "qty"], leaseMs: 60_000`, "retentionMs = 864_000_000"} {
		if !strings.Contains(cfg, w) {
			t.Errorf("config for changed answers lacks %q:\n%s", w, cfg)
		}
	}
}
