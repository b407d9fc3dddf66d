package design

import (
	"strings"
	"testing"
)

// kitText is every file of k, joined, with the paths.
func kitText(k *Kit) string {
	var b strings.Builder
	for _, f := range k.Files() {
		b.WriteString("### " + f.Path + "\n" + f.Text + "\n")
	}
	return b.String()
}

// TestPythonKits: the Python stacks get their kit, generated from the
// document (fields, lock timeouts, retention, D2's table and statements),
// and their documents still pass Check; other stacks get none.
func TestPythonKits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file, stack string
		want        []string
	}{
		{"django-mysql-rabbitmq", "python-django", []string{
			"idempotency/middleware.py", "class IdempotencyMiddleware", "idempotency/consumer.py",
			`"fields": ["room_id", "check_in", "check_out", "guests"]`, `"lock_timeout": 30,`, `"lock_timeout": 90,`,
			"RETENTION_SECONDS = 259200", `"path": "/api/bookings/"`, "ON DUPLICATE KEY UPDATE duplicates = duplicates + 1",
			"FOR UPDATE", "NOW(6)", "ENGINE=InnoDB", "hmac.compare_digest", "Idempotent-Replayed",
			"AND lock_version = %s", "ORDER BY expires_at\n LIMIT 1000", "Retry-After",
			`"heartbeat": 10,`, `"heartbeat": 30,`, "idempotency/heartbeat.py", "def renew(", "client_flag=CLIENT.FOUND_ROWS",
			"lease.stop()  # before completing", "test_live_holder_keeps_its_lease_past_the_lock_timeout",
			"test_lease_lost_by_the_heartbeat_is_refused_and_the_new_holder_stands", `"heartbeat", 0)  # a paused holder`}},
		{"fastapi-postgres-stripe", "python-fastapi", []string{
			"idempotency/dependency.py", "def idempotent(action: str)", "idempotency/payments.py",
			`"fields": ["customer_id", "amount", "currency", "payment_method"]`, `"lock_timeout": 30,`,
			"RETENTION_SECONDS = 604800", `"path": "/v1/charges"`, "ON CONFLICT (idempotency_key, user_id) DO NOTHING",
			"CONSTRAINT pk_idempotency PRIMARY KEY (idempotency_key, user_id)", "response_raw", "FOR UPDATE",
			"hmac.compare_digest", "Idempotent-Replayed", `step: str = "charge"`, "idempotency_key=stripe_idempotency_key(idem.key, step)",
			"expires_at < now()", "class FakeStripe", `"key_field": "id",`, "def webhook_account()", "test_resent_webhook_is_handled_once", "test_lost_provider_response_is_resent_with_the_same_reference",
			`"heartbeat": 10,`, "idempotency/heartbeat.py", "def renew(", "self.lease.stop()  # before completing",
			"test_live_holder_keeps_its_lease_past_the_lock_timeout", "test_lease_lost_by_the_heartbeat_is_refused_and_the_new_holder_stands"}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			d, _ := stackDoc(t, tc.file) // renders and passes Check
			k := KitOf(d)
			if k == nil {
				t.Fatalf("no kit for %s", tc.file)
			}
			if k.Stack != tc.stack || k.Run == "" || k.Intro == "" || len(k.Middleware) == 0 || len(k.Fingerprint) == 0 || len(k.Cleanup) == 0 || len(k.Tests) == 0 {
				t.Fatalf("kit %q incomplete: %+v", k.Stack, k)
			}
			s := kitText(k)
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("kit lacks %q", w)
				}
			}
			for _, w := range []string{"payonce", "time.sleep(1", "uuid"} {
				if strings.Contains(strings.ToLower(s), w) {
					t.Errorf("kit has %q:\n%s", w, around(s, w))
				}
			}
		})
	}
	for _, other := range []string{"express-dynamodb-sqs", "spring-postgres-kafka-adyen", "go-chi-redis"} {
		a, err := LoadAnswers("testdata/stacks/" + other + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		d, err := Build(*a, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if pythonKit(d) != nil {
			t.Errorf("%s: a Python kit for another stack", other)
		}
	}
}

// TestPythonKitFollowsAnswers: another lock timeout, field list and
// retention change the generated code; a Python stack on a store the kits
// do not cover gets none.
func TestPythonKitFollowsAnswers(t *testing.T) {
	t.Parallel()
	a, err := LoadAnswers("testdata/stacks/django-mysql-rabbitmq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a.Actions[0].Duration = "20s"
	a.Actions[0].Fields = []string{"room_id", `o"dd`}
	a.Retention = "10d"
	d, err := Build(*a, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	s := kitText(KitOf(d))
	for _, w := range []string{`"lock_timeout": 60,`, `"heartbeat": 20,`, `"fields": ["room_id", "o\"dd"]`, "RETENTION_SECONDS = 864000"} {
		if !strings.Contains(s, w) {
			t.Errorf("kit lacks %q", w)
		}
	}
	a.Stack.Database = "MongoDB"
	if d, err = Build(*a, nil, now); err != nil {
		t.Fatal(err)
	}
	if KitOf(d) != nil {
		t.Error("a Django kit on MongoDB, which it does not implement")
	}
}
