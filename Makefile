# payonce: make test (the whole suite), make demo (the main job), make bench.
GO ?= go
# A count, not a duration: a duration-bounded fuzz run can end with the
# engine's own "context deadline exceeded" when a worker is slow to stop on
# a loaded machine, which is not a finding.
FUZZTIME ?= 30000x
STRIPE_MOCK_VERSION := v0.203.0
STRIPE_MOCK := .bin/stripe-mock-$(STRIPE_MOCK_VERSION)
# Every module of the workspace (go.work): the SDK (.), the operator CLI,
# the examples, the NATS inbox, the Redis store, the DynamoDB store (its
# tests install dynalite with npm into idempotency/dynamostore/.bin), the CLIs' shared plumbing (internal/cli) and
# the lab. make test covers them all.
PKGS := ./... ./cmd/payonce/... ./examples/... ./idempotency/dynamostore/... ./idempotency/inbox/natsinbox/... ./idempotency/redisstore/... ./internal/cli/... ./lab/...

.PHONY: test vet unit fuzz monitoring runbook demo bench prunebench scalebench chargebench design-doc design-screenshot demo-worker report-screenshot torture

# The whole suite: go vet and fpcheck, every test with the race detector against a
# throwaway PostgreSQL (or TEST_DATABASE_URL when set), a brief run of
# every fuzz target, the alert rules checked and unit-tested by promtool, and
# the runbook's commands run as written.
test: vet unit fuzz monitoring runbook

# go vet, and fpcheck: no fingerprint compared in variable time (==, a
# switch, bytes.Equal, slices.Contains, ...) anywhere in the module or its
# tests; a test cannot tell a == from Fingerprint.Equal's constant time.
vet:
	$(GO) vet $(PKGS)
	$(GO) run ./lab/cmd/fpcheck $(PKGS)

unit: $(STRIPE_MOCK)
	$(GO) run ./lab/cmd/withpg -stripe-mock $(STRIPE_MOCK) -- $(GO) test -race -count=1 -timeout 15m $(PKGS)

# stripe-mock checks the Stripe adapter's requests against Stripe's OpenAPI
# spec (providers/stripe/stripemock_test.go); installed from the module
# proxy into .bin on first use.
$(STRIPE_MOCK):
	GOBIN=$(CURDIR)/.bin $(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)
	mv .bin/stripe-mock $@

# Each fuzz target runs briefly beyond its seed corpus (which `go test`
# already runs), so that none of them rots.
fuzz:
	@set -e; for target in $$($(GO) test -list '^Fuzz' $(PKGS) | grep '^Fuzz' ); do \
	  pkg=$$(grep -rl "func $$target(" --include='*_test.go' . | head -1 | xargs dirname); \
	  echo "fuzz $$pkg $$target"; \
	  out=$$($(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) $$pkg 2>&1) && { echo "$$out" | tail -1; continue; }; \
	  echo "$$out"; \
	  if echo "$$out" | grep -q 'Failing input written'; then exit 1; fi; \
	  echo "fuzz engine error without a finding; running $$target again"; \
	  $(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

# promtool check rules + promtool test rules (check.sh installs promtool
# from Debian's prometheus package when it is missing and we are root).
monitoring:
	bash deploy/monitoring/check.sh

# Every `sh runbook` and `sql runbook` block of docs/runbook.md, run in order
# against a throwaway PostgreSQL in which the situations it treats are
# planted, its outputs checked (lab/cmd/runbookcheck).
runbook:
	$(GO) run ./lab/cmd/withpg -- $(GO) run ./lab/cmd/runbookcheck

demo:
	@echo "make demo: building the lab (lab/cmd/lab), then the checkout worker (examples/checkout); the first build takes a minute or two"
	$(GO) run ./lab/cmd/lab demo

# The full run and BENCH_ONLY=stores end with the Redis and DynamoDB
# stores: what they start is installed first (.ci/deps/stores.sh).
bench:
	@case "$$BENCH_ONLY" in ""|stores) bash .ci/deps/stores.sh ;; esac
	$(GO) run ./lab/cmd/withpg -durable -var BENCH_DATABASE_URL -- $(GO) run ./lab/cmd/bench

# The claim+complete cycle from 1, 2 and 4 OS processes, directly and
# through PgBouncer in transaction pooling mode (BENCHMARKS.md).
scalebench:
	$(GO) run ./lab/cmd/withpg -durable -var BENCH_DATABASE_URL -- $(GO) run ./lab/cmd/scalebench

# The torture run: Toxiproxy between the checkout workers and PostgreSQL
# and the providers, workers SIGKILLed at random, 10,000 intents, two
# reconcilers at once; the invariants checked at the end (RELIABILITY.md).
# make test runs a 1,000-intent variant (lab/cmd/lab TestTorture).
TORTURE_INTENTS ?= 10000
TORTURE_SEED ?= 1
torture:
	@echo "make torture: building the lab (lab/cmd/lab), the checkout worker and Toxiproxy; the first build takes a minute or two"
	$(GO) run ./lab/cmd/lab demo torture --intents $(TORTURE_INTENTS) --seed $(TORTURE_SEED)

# The consumer path: River jobs through the inbox, a worker killed midway.
demo-worker:
	$(GO) run ./lab/cmd/lab demo worker

# What the safety costs on the charge path: Client.Charge against a
# hand-written pgx + stripe-go charge that records nothing (BENCHMARKS.md).
chargebench:
	$(GO) run ./lab/cmd/withpg -durable -var BENCH_DATABASE_URL -- $(GO) run ./lab/cmd/chargebench

# The cleanup job against a table of millions of rows (BENCHMARKS.md).
prunebench:
	$(GO) run ./lab/cmd/withpg -durable -var BENCH_DATABASE_URL -- $(GO) run ./lab/cmd/prunebench

# The idempotency design document of payonce's own checkout service
# (examples/checkout), from the committed answers and a scan of its code;
# constraints C1..C7 are checked before it is written (payonce design).
design-doc:
	$(GO) run ./cmd/payonce design --no-input --answers cmd/payonce/internal/design/testdata/checkout.yaml --scan examples/checkout --out docs/idempotency-design.html

# An example divergence report (payonce report --format html), checked in
# headless Chromium and screenshotted.
report-screenshot:
	$(GO) run ./lab/cmd/reportshot docs/report-example.html docs/report-example.png

# The document rendered in headless Chromium (Debian's chromium; .ci/run
# installs it): zero network requests, every TOC link resolves, and a
# full-page screenshot to look at.
design-screenshot: design-doc
	$(GO) run ./lab/cmd/designshot docs/idempotency-design.html docs/idempotency-design.png
