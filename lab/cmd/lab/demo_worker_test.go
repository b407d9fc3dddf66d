package main

import (
	"regexp"
	"testing"

	"github.com/payonce/payonce/pgtest"
)

// The consumer path, small: every order written once from two jobs, poison
// dead-lettered once, every payment charged once, the worker killed once.
func TestDemoWorker(t *testing.T) {
	t.Parallel()
	out, code := runCLI(t, nil, "demo", "worker", "--orders", "60", "--charges", "20", "--seed", "4",
		"--database-url", pgtest.BaseURL(t))
	if code != 0 {
		t.Fatalf("demo worker exited %d:\n%s", code, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`worker killed 1 time\(s\)`),
		regexp.MustCompile(`orders: \d+ written once each from two jobs apiece; [1-9]\d* poison orders dead-lettered once`),
		regexp.MustCompile(`charges: 20 payments, one PaymentIntent each at the provider`),
		regexp.MustCompile(`ok: every order once, every payment once`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the summary does not match %q:\n%s", want, out)
		}
	}
}
