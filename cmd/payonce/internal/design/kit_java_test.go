package design

import (
	"strings"
	"testing"
)

func TestJavaKitForSpringPostgres(t *testing.T) {
	d, rendered := stackDoc(t, "spring-postgres-kafka-adyen")
	k := KitOf(d)
	if k == nil || k.Stack != "java-servlet" {
		t.Fatalf("KitOf(spring-postgres-kafka-adyen) = %+v, want the java-servlet kit", k)
	}
	files := map[string]string{}
	for _, f := range k.Files() {
		files[f.Path] = f.Text
	}
	actions := files["src/main/java/idempotency/Actions.java"]
	for _, want := range []string{
		`Map.entry("POST /payments", new Action("authorise", List.of("amount", "currency", "merchant_account", "payment_method", "shopper_reference"), Duration.ofSeconds(30), Duration.ofMillis(10000)))`,
		`Map.entry("settleOrder", new Action("settleOrder", List.of(), Duration.ofSeconds(360), Duration.ofMillis(120000)))`,
		"Duration.ofSeconds(2592000L)", // retention 30d
	} {
		if !strings.Contains(actions, want) {
			t.Errorf("Actions.java lacks %s:\n%s", want, actions)
		}
	}
	store := files["src/main/java/idempotency/IdempotencyStore.java"]
	for _, want := range []string{"INSERT INTO idempotency_store", "ON CONFLICT (idempotency_key, user_id) DO NOTHING", "AND lock_version = ?", "locked_until <= now()",
		"static final String HEARTBEAT", "scheduleWithFixedDelay", "public boolean renew("} {
		if !strings.Contains(store, want) {
			t.Errorf("IdempotencyStore.java lacks %q", want)
		}
	}
	if !strings.Contains(files["schema.sql"], "CREATE TABLE idempotency_store") || files["schema.sql"] != referenceDDL()+"\n" {
		t.Error("schema.sql is not D2's reference DDL")
	}
	if !strings.Contains(files["src/main/java/idempotency/Fingerprint.java"], "MessageDigest.isEqual") {
		t.Error("the fingerprint is not compared in constant time")
	}
	if !strings.Contains(files["src/main/java/idempotency/AdyenIdempotency.java"], `STEP = "charge"`) {
		t.Error("AdyenIdempotency.java lacks the step of the document's Adyen reference")
	}
	if !strings.Contains(files["src/main/java/idempotency/IdempotencyFilter.java"], "FilterRegistrationBean") || !strings.Contains(k.Intro, "FilterRegistrationBean") {
		t.Error("the filter does not say how Spring registers it")
	}
	tests := files["src/test/java/idempotency/IdempotencyKitTest.java"]
	for _, want := range []string{`ROUTE = "POST /payments"`, "providerResponseLost", "sameKeyOtherSignificantField", "cleanupDeletes",
		"liveHolderKeepsItsLeasePastTheLockTimeout", "leaseLostByTheHeartbeatIsRefusedAndTheNewHolderStands", "withHeartbeat(Duration.ZERO)"} {
		if !strings.Contains(tests, want) {
			t.Errorf("the tests lack %q", want)
		}
	}
	if !strings.Contains(rendered, "class IdempotencyFilter implements Filter") || !strings.Contains(rendered, "Run: ") {
		t.Error("the document does not show the kit in D3..D6")
	}
	for _, f := range k.Files() {
		if strings.Contains(f.Text, "payonce") {
			t.Errorf("%s mentions payonce: an engineer of the stack cannot follow it", f.Path)
		}
	}
}

func TestJavaKitFollowsTheDocument(t *testing.T) {
	a, err := LoadAnswers("testdata/stacks/spring-postgres-kafka-adyen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a.Retention = "45d"
	a.Actions[0].Duration = "20s"
	a.Actions[0].Fields = []string{"total", "cart_id"}
	a.Actions[0].Trigger = "PUT /carts/checkout"
	d, err := Build(*a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(d, out); err != nil {
		t.Fatal(err)
	}
	k := KitOf(d)
	if k == nil {
		t.Fatal("no kit")
	}
	actions := k.Middleware[0].Text
	want := `Map.entry("PUT /carts/checkout", new Action("authorise", List.of("cart_id", "total"), Duration.ofSeconds(60), Duration.ofMillis(20000)))`
	if !strings.Contains(actions, want) || !strings.Contains(actions, "Duration.ofSeconds(3888000L)") {
		t.Errorf("Actions.java does not follow the answers (want %s and 45d):\n%s", want, actions)
	}
}

func TestJavaKitOnlyForJavaOnPostgres(t *testing.T) {
	for _, name := range []string{"django-mysql-rabbitmq", "express-dynamodb-sqs", "fastapi-postgres-stripe", "go-chi-redis"} {
		d, _ := stackDoc(t, name)
		if javaKit(d) != nil {
			t.Errorf("%s: the Java kit claims a stack that is not Java on PostgreSQL", name)
		}
	}
	a, err := LoadAnswers("testdata/stacks/spring-postgres-kafka-adyen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Stack{{Language: "Java", Framework: "Spring", Database: "MySQL"}, {Language: "Kotlin", Framework: "Spring", Database: "PostgreSQL"}, {Language: "Java", Framework: "Vert.x", Database: "PostgreSQL"}} {
		b := *a
		b.Stack = s
		d, err := Build(b, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if javaKit(d) != nil {
			t.Errorf("%+v: the Java kit claims it", s)
		}
	}
}
