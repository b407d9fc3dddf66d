// Command withpg runs a command with a throwaway PostgreSQL cluster.
//
//	go run ./internal/cmd/withpg [-var TEST_DATABASE_URL] [-durable] -- CMD ARGS...
//
// When the variable named by -var is already set, the command runs against
// that server and no cluster is started. Otherwise a cluster is started from
// the local binaries, its URL is exported in that variable, and the cluster is
// stopped when the command ends, also when it fails or withpg is interrupted.
// The command's exit code is withpg's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/payonce/payonce/internal/localpg"
)

func main() {
	varName := flag.String("var", "TEST_DATABASE_URL", "environment variable that receives the database URL")
	durable := flag.Bool("durable", false, "keep fsync and synchronous_commit on (benchmarks)")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg [-var NAME] [-durable] -- CMD ARGS...")
		os.Exit(2)
	}
	os.Exit(run(*varName, *durable, args))
}

func run(varName string, durable bool, args []string) int {
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
