package localpg

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Bouncer is a PgBouncer in transaction pooling mode in front of one
// PostgreSQL server, started by [StartBouncer].
type Bouncer struct {
	// URL connects to the server's database through the bouncer; [URLFor]
	// to any other database of the server.
	URL  string
	Port int
	user string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// BouncerMissing explains how to get PgBouncer when it is not installed.
const BouncerMissing = "pgbouncer is not installed: `apt-get install pgbouncer` (Debian's package; .ci/run installs it)"

// StartBouncer starts Debian's pgbouncer (pool_mode=transaction) in front
// of the server and database of serverURL, as the postgres system user when
// running as root (pgbouncer refuses root), on a free loopback port.
// Every database of the server is reachable through it ([Bouncer.URLFor]).
// Startup parameters the bouncer does not track (search_path, options) are
// dropped, so a database, not a schema, isolates a test.
func StartBouncer(ctx context.Context, serverURL string) (*Bouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			return nil, fmt.Errorf("localpg: %s", BouncerMissing)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("localpg: bouncer: parse server URL: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	user := u.User.Username()
	pass, _ := u.User.Password()
	db := filepath.Base(u.Path)
	if db == "" || db == "/" || db == "." {
		db = user
	}
	dir, err := os.MkdirTemp("", "payonce-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("localpg: bouncer: %w", err)
	}
	cred, err := serverCredential()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	listen, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	serverConn := fmt.Sprintf("host=%s port=%s user=%s", host, port, user)
	if pass != "" {
		serverConn += " password=" + pass
	}
	ini := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,search_path,options
logfile = %s
pidfile = %s
`, serverConn, listen, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	cfgPath := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfgPath, []byte(ini), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localpg: bouncer: %w", err)
	}
	if cred != nil {
		for _, p := range []string{dir, cfgPath} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("localpg: bouncer: chown %s: %w", p, err)
			}
		}
	}
	cmd := exec.Command(bin, "-q", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localpg: start pgbouncer: %w", err)
	}
	b := &Bouncer{Port: listen, dir: dir, cmd: cmd, done: make(chan struct{}), user: user}
	b.URL = b.URLFor(db)
	go func() { _ = cmd.Wait(); close(b.done) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("localpg: pgbouncer exited during start:\n%s", log)
		case <-ctx.Done():
			b.Stop()
			return nil, ctx.Err()
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(listen), 200*time.Millisecond); err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("localpg: pgbouncer not listening on %d after 10s", listen)
		}
	}
}

// URLFor connects to database db of the server through the bouncer.
func (b *Bouncer) URLFor(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(b.user), b.Port, url.PathEscape(db))
}

// Stop stops the bouncer and removes its directory.
func (b *Bouncer) Stop() {
	if b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	}
	os.RemoveAll(b.dir)
}
