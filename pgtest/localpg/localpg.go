// Package localpg starts a throwaway PostgreSQL cluster from the local
// PostgreSQL binaries, for tests, the demo, the examples and the benchmarks.
//
// The cluster lives in a fresh temporary directory, listens on a free
// loopback port, trusts local connections and is removed by [Cluster.Stop].
// initdb refuses to run as root, so when the current user is root the
// server's processes run as the "postgres" system user.
package localpg

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options tunes a throwaway cluster. The zero value is a durable server
// (fsync on), which is what benchmarks want.
type Options struct {
	// Fast turns off fsync, synchronous_commit and full_page_writes: a crash
	// of the machine loses the cluster, which is fine for tests. Default false.
	Fast bool
	// Settings are extra "name=value" server settings passed with -c.
	Settings []string
	// Log receives the server's log. Default: discarded.
	Log *os.File
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	// URL connects as the superuser to the "postgres" database.
	URL string
	// BinDir is the directory of the PostgreSQL binaries that run it.
	BinDir string
	// Port is the TCP port on 127.0.0.1.
	Port int

	dir  string
	cmd  *exec.Cmd
	once sync.Once
	err  error
	done chan struct{}
}

// BinDir finds the PostgreSQL binaries: $PG_BINDIR, then the newest
// /usr/lib/postgresql/*/bin, then `pg_config --bindir`.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("localpg: no PostgreSQL binaries found (looked at $PG_BINDIR, /usr/lib/postgresql/*/bin and pg_config --bindir); install them with `apt-get install -y postgresql` or set DATABASE_URL / TEST_DATABASE_URL to a running server")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start initialises and starts a cluster. Stop it with [Cluster.Stop].
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "payonce-pg-")
	if err != nil {
		return nil, fmt.Errorf("localpg: temp dir: %w", err)
	}
	cred, err := serverCredential()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("localpg: chown %s: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localpg: initdb: %w\n%s", err, out)
	}

	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400",
		"-c", "shared_buffers=256MB", "-c", "log_min_messages=warning"}
	if opts.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, s := range opts.Settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	// Pdeathsig: if this process dies without calling Stop, the server
	// shuts down immediately instead of lingering.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	cmd.Dir = dir
	if opts.Log != nil {
		cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localpg: start postgres: %w", err)
	}
	c := &Cluster{
		URL:    fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		BinDir: bin, Port: port, dir: dir, cmd: cmd, done: make(chan struct{}),
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	if err := c.waitReady(ctx, 30*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-c.done:
			return fmt.Errorf("localpg: postgres exited during start: %v", c.err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port), 200*time.Millisecond)
		if err == nil {
			conn.Close()
			// Accepting TCP does not mean accepting queries yet: ask pg_isready.
			if exec.Command(filepath.Join(c.BinDir, "pg_isready"), "-q", "-h", "127.0.0.1",
				"-p", strconv.Itoa(c.Port), "-U", "postgres").Run() == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localpg: postgres not ready after %s", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (fast mode) and removes its directory. It is
// safe to call more than once.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		if c.cmd.Process != nil {
			_ = c.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-c.done:
			case <-time.After(15 * time.Second):
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
				<-c.done
			}
		}
		os.RemoveAll(c.dir)
	})
}

// serverCredential returns the credential of the postgres system user when
// running as root (initdb refuses root), else nil.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("localpg: running as root needs a \"postgres\" system user for initdb (it refuses root): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localpg: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Version reports the server binaries' version, e.g. "postgres (PostgreSQL) 15.18".
func Version(binDir string) string {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "unknown"
	}
	s := bufio.NewScanner(strings.NewReader(string(out)))
	s.Scan()
	return s.Text()
}
