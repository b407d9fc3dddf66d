// Command withpg runs a command with a throwaway PostgreSQL cluster.
//
//	go run ./lab/cmd/withpg [-var TEST_DATABASE_URL] [-durable] [-stripe-mock BIN] -- CMD ARGS...
//
// When the variable named by -var is already set, the command runs against
// that server and no cluster is started. Otherwise a cluster is started from
// the local binaries, its URL is exported in that variable, and the cluster is
// stopped when the command ends, also when it fails or withpg is interrupted.
// The command's exit code is withpg's.
//
// With -stripe-mock, it also starts that stripe-mock binary on a free
// loopback port and exports its URL in STRIPE_MOCK_URL (unless already
// set), for the Stripe adapter's request-shape conformance tests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/payonce/payonce/pgtest/localpg"
)

func main() {
	varName := flag.String("var", "TEST_DATABASE_URL", "environment variable that receives the database URL")
	durable := flag.Bool("durable", false, "keep fsync and synchronous_commit on (benchmarks)")
	stripeMock := flag.String("stripe-mock", "", "stripe-mock binary to start; its URL goes in STRIPE_MOCK_URL")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg [-var NAME] [-durable] [-stripe-mock BIN] -- CMD ARGS...")
		os.Exit(2)
	}
	os.Exit(run(*varName, *durable, *stripeMock, args))
}

// startStripeMock starts bin on a free loopback port and waits until it
// answers.
func startStripeMock(bin string) (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	// stripe-mock also serves HTTPS, on :12112 unless told otherwise: a
	// system-chosen loopback port keeps two runs from colliding.
	cmd := exec.Command(bin, "-http-addr", addr, "-https-addr", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() { _ = cmd.Process.Kill(); <-exited }
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			return "", nil, fmt.Errorf("stripe-mock exited before listening: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return "http://" + addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("stripe-mock did not listen on %s within 30s", addr)
}

func run(varName string, durable bool, stripeMock string, args []string) int {
	if stripeMock != "" && os.Getenv("STRIPE_MOCK_URL") == "" {
		url, stop, err := startStripeMock(stripeMock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "withpg:", err)
			return 1
		}
		defer stop()
		os.Setenv("STRIPE_MOCK_URL", url)
		fmt.Fprintf(os.Stderr, "withpg: stripe-mock on %s\n", url)
	}
	if os.Getenv(varName) == "" {
		c, err := localpg.Start(context.Background(), localpg.Options{Fast: !durable})
		if err != nil {
			fmt.Fprintln(os.Stderr, "withpg:", err)
			return 1
		}
		defer c.Stop()
		os.Setenv(varName, c.URL)
		fmt.Fprintf(os.Stderr, "withpg: throwaway PostgreSQL on port %d (%s)\n", c.Port, localpg.Version(c.BinDir))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "withpg:", err)
		return 1
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if exit.ExitCode() < 0 {
			return 1
		}
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "withpg:", err)
		return 1
	}
}
