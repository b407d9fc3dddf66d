package main

import (
	"bufio"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary is the service when CHECKOUT_SERVE=1: the environment
// contract is tested on a real process.
func TestMain(m *testing.M) {
	if os.Getenv("CHECKOUT_SERVE") == "1" {
		if err := run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The crash matrix's cases mostly wait (for a dead process's lease to
	// end, for the recovery job): run more of them at once than there are
	// CPUs, unless -test.parallel says how many.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(8, runtime.GOMAXPROCS(0))))
	}
	os.Exit(m.Run())
}

// With neither DATABASE_URL nor STRIPE_API_BASE, the service starts its
// own PostgreSQL and Stripe fake, listens on ADDR, and charges.
func TestStartsWithNothingConfigured(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHECKOUT_SERVE=1", "ADDR=127.0.0.1:0", "DATABASE_URL=", "STRIPE_API_BASE=", "STRIPE_SECRET_KEY=", "ADYEN_API_BASE=", "PAYPAL_API_BASE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "checkout: listening on "); ok {
				lines <- u
			}
		}
		close(lines)
	}()
	var base string
	select {
	case base = <-lines:
	case <-time.After(3 * time.Minute):
		// initdb and the first start of a cluster take most of it on a
		// loaded machine.
		t.Fatalf("the service did not start within 3 minutes; logs:\n%s", logs.String())
	}
	if base == "" {
		t.Fatalf("the service exited; logs:\n%s", logs.String())
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(
		`{"amount": "12.50", "currency": "USD", "recipient": "acct_x", "payment_method": "pm_card_visa", "provider": "stripe"}`))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", "order-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("charge: %d; logs:\n%s", resp.StatusCode, logs.String())
	}
	if !strings.Contains(logs.String(), "STRIPE_API_BASE is unset: started the provider's fake in-process") || !strings.Contains(logs.String(), "url=http://127.0.0.1:") {
		t.Fatalf("the fake's URL is not logged:\n%s", logs.String())
	}
}

// syncBuffer collects the child's stderr while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
