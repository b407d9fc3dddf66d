// Package dynamotest starts a real DynamoDB API for tests: dynalite (an
// implementation of the DynamoDB API on LevelDB, here in memory), one
// server per test binary on a free loopback port, started on first use
// and stopped by [Stop] (call it from TestMain after m.Run, or use
// [Main]). Each test gets a table of its own ([Table]): nothing is
// mocked.
//
// dynalite is installed with npm (Node is required) into the folder
// .bin/dynalite of the module idempotency/dynamostore on first use, at
// the version [Version], and reused afterwards.
package dynamotest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/payonce/payonce/idempotency/dynamostore"
)

// Version is the dynalite release the harness installs.
const Version = "4.0.0"

// startTimeout bounds the install (npm) and the wait for readiness.
const startTimeout = 3 * time.Minute

var (
	mu     sync.Mutex
	server *process
	serial atomic.Int64
)

type process struct {
	cmd      *exec.Cmd
	endpoint string
	done     chan struct{} // closed when the process has exited
}

// Main runs the tests of m and stops the server they started:
//
//	func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Start returns the endpoint (http://127.0.0.1:<port>) of the test
// binary's server, installing dynalite and starting the server on first
// use.
func Start() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if server == nil {
		p, err := start()
		if err != nil {
			return "", err
		}
		server = p
	}
	return server.endpoint, nil
}

// Stop kills the server, if one was started, and waits for it to exit.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if server == nil {
		return
	}
	_ = server.cmd.Process.Kill()
	<-server.done
	server = nil
}

// NewClient returns a client of endpoint with static credentials (dynalite
// checks that a request is signed, not by whom).
func NewClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// Client returns a client of the test binary's server, starting it on
// first use; it stops the test if the server cannot start.
func Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	endpoint, err := Start()
	if err != nil {
		t.Fatalf("dynamotest: %v", err)
	}
	return NewClient(endpoint)
}

// TableName returns a table name that no other call in this process
// returned.
func TableName() string {
	return "payonce-t" + strconv.FormatInt(serial.Add(1), 10)
}

// Table creates a new table of the store's schema (dynamostore.CreateTable)
// with client and returns its name; it is deleted when the test ends.
func Table(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	name := TableName()
	if err := dynamostore.CreateTable(context.Background(), client, name); err != nil {
		t.Fatalf("dynamotest: %v", err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

// installDir is .bin/dynalite in the module's folder (this file's
// parent's parent).
func installDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the dynamotest package's source")
	}
	return filepath.Join(filepath.Dir(filepath.Dir(file)), ".bin", "dynalite"), nil
}

// install returns dynalite's cli.js, installing it first when missing.
// npm installs into a folder of its own, renamed into place when complete,
// so that test binaries installing at once never see half an install.
func install() (string, error) {
	dir, err := installDir()
	if err != nil {
		return "", err
	}
	cli := filepath.Join(dir, "node_modules", "dynalite", "cli.js")
	if _, err := os.Stat(cli); err == nil {
		return cli, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("dynalite is not installed at %s and there is no npm in PATH: install Node.js (npm) to run these tests", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "dynalite-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", tmp, "dynalite@"+Version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install dynalite@%s: %v\n%s", Version, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(cli); statErr != nil { // not installed by another binary meanwhile
			return "", err
		}
	}
	return cli, nil
}

// start runs a server on a free port. Another process may take the port
// between our probe and the server's bind: the server then exits, and
// start tries another port.
func start() (*process, error) {
	cli, err := install()
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		p, err := startOn(cli)
		if err == nil {
			return p, nil
		}
		last = err
	}
	return nil, last
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startOn(cli string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", cli, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	// The log is drained so that the server never blocks on a full pipe,
	// and kept (its start) for the error of a server that fails.
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logMu.Lock()
			if log.Len() < 1<<14 {
				log.WriteString(sc.Text() + "\n")
			}
			logMu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	fail := func(why string) (*process, error) {
		_ = cmd.Process.Kill()
		<-p.done
		logMu.Lock()
		defer logMu.Unlock()
		return nil, fmt.Errorf("dynalite on port %d %s; its log:\n%s", port, why, log.String())
	}
	// Ready when it answers ListTables: polled until then, or until the
	// process exits or the timeout.
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	client := NewClient(p.endpoint)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{}, func(o *dynamodb.Options) {
			o.RetryMaxAttempts = 1
		}); err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return fail("exited")
		case <-ctx.Done():
			return fail("not ready after " + startTimeout.String())
		case <-tick.C:
		}
	}
}
