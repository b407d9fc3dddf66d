// Package redistest starts a real redis-server for tests: one per test
// binary, on a free loopback TCP port, without persistence (--save ""
// --appendonly no), started on first use and stopped by [Stop] (call it
// from TestMain after m.Run, or use [Main]). Tests share the server and
// keep apart by key prefix ([Prefix]): nothing is mocked.
//
// It starts Redis Clusters too ([StartCluster]): the test binary's shared
// one (3 primaries, 1 replica each; [ClusterClient]), stopped by Stop as
// well, or a test's own ([NewCluster]), for a test that kills nodes. A
// program that is not a test (a benchmark) calls StartCluster and
// [Cluster.Stop] itself.
//
// The binaries are redis-server and redis-cli from PATH, else from
// /usr/bin (Debian's redis-server package, which brings redis-tools;
// .ci/run installs it when missing).
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// startTimeout bounds the wait for the server's readiness.
const startTimeout = 30 * time.Second

var (
	mu     sync.Mutex
	server *process
	serial atomic.Int64
)

type process struct {
	cmd  *exec.Cmd
	addr string
	dir  string
	done chan struct{} // closed when the process has exited
}

// Main runs the tests of m and stops the server they started:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Addr returns the address of the test binary's server, starting it on
// first use. It stops the test if the server cannot start.
func Addr(t testing.TB) string {
	t.Helper()
	addr, err := Start()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return addr
}

// Start returns the address of the test binary's server, starting it on
// first use: Addr for examples and benchmarks' setup, which have no test.
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
	return server.addr, nil
}

// Client returns a new client of the test binary's server, closed when the
// test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t), MaintNotificationsConfig: NoMaintNotifications()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NoMaintNotifications returns the go-redis option that turns maintenance
// notifications off. In go-redis v9.23.0 their default (auto) mode races
// with itself on a server that lacks them (Redis before 8): the first
// handshake refused rewrites the client's options while a connection taken
// with Client.Conn, as redisstore's WaitReplicas does, reads them under
// another lock. The race detector reports it; Redis 7 servers, as Debian's,
// need the option off.
func NoMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// Prefix returns a key prefix that no other call in this process
// returned, for a store of a test (or an example) of its own.
func Prefix() string {
	return "t" + strconv.FormatInt(serial.Add(1), 10)
}

// Stop kills the server and the shared cluster, those started, and waits
// for them to exit.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if server != nil {
		server.stop()
		_ = os.RemoveAll(server.dir)
		server = nil
	}
	if cluster != nil {
		cluster.Stop()
		cluster = nil
	}
}

// stop kills the server's process group and waits for it to exit.
func (p *process) stop() {
	killGroup(p)
	<-p.done
}

func binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	const debian = "/usr/bin/redis-server"
	if _, err := os.Stat(debian); err != nil {
		return "", fmt.Errorf("no redis-server in PATH nor at %s: install Debian's redis-server package (apt-get install redis-server)", debian)
	}
	return debian, nil
}

// start runs a server on a free port. Another process may take the port
// between our probe and the server's bind: the server then exits, and
// start tries another port.
func start() (*process, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, err
		}
		p, err := startOn(bin, port, dir)
		if err == nil {
			return p, nil
		}
		_ = os.RemoveAll(dir)
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

// startOn runs a server on port with dir as its working directory (the
// caller removes it), with the extra arguments args, and waits until it
// answers PING.
func startOn(bin string, port int, dir string, args ...string) (*process, error) {
	cmd := exec.Command(bin, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "notice"}, args...)...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, done: make(chan struct{})}

	// The server says when it accepts connections; the log goes on being
	// drained so that the server never blocks on a full pipe.
	ready := make(chan struct{})
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			logMu.Lock()
			if log.Len() < 1<<14 {
				log.WriteString(sc.Text() + "\n")
			}
			logMu.Unlock()
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				once.Do(func() { close(ready) })
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	fail := func(why string) (*process, error) {
		p.stop()
		logMu.Lock()
		defer logMu.Unlock()
		return nil, fmt.Errorf("redis-server on port %d %s; its log:\n%s", port, why, log.String())
	}
	select {
	case <-ready:
	case <-p.done:
		return fail("exited")
	case <-time.After(startTimeout):
		return fail("not ready after " + startTimeout.String())
	}
	// Ready by its own word; a PING proves it answers on the port.
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fail("does not answer PING: " + err.Error())
	}
	return p, nil
}
