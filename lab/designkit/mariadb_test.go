package designkit

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A throwaway MariaDB (Debian's mariadb-server) for the kits' tests: one
// server per test binary, in a temporary data folder, on a free port of
// 127.0.0.1, stopped by atExit. root has no password and is reachable
// only from this machine's loopback.
var (
	mariaOnce sync.Once
	mariaAddr string
	mariaErr  error
)

// mariaDBStart bounds the server's start: a loaded 2-core machine
// initialises the data folder and starts InnoDB in a few seconds.
const mariaDBStart = 60 * time.Second

// mariaDB returns host:port of the shared throwaway MariaDB, starting it
// on first use; the test fails when it cannot.
func mariaDB(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"mariadb-install-db", "mariadbd"} {
		if mariaProgram(p) == "" {
			need(t, "python.sh", p) // fails, naming the script
		}
	}
	mariaOnce.Do(func() { mariaAddr, mariaErr = startMariaDB() })
	if mariaErr != nil {
		t.Fatalf("designkit: MariaDB: %v", mariaErr)
	}
	return mariaAddr
}

func startMariaDB() (string, error) {
	dir, err := os.MkdirTemp("", "designkit-mariadb-")
	if err != nil {
		return "", err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	data := filepath.Join(dir, "data")
	install := exec.Command(mariaProgram("mariadb-install-db"), "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := mariaRunBounded(install, mariaDBStart); err != nil {
		cleanup()
		return "", fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	port, err := mariaFreePort()
	if err != nil {
		cleanup()
		return "", err
	}
	var log bytes.Buffer
	srv := exec.Command(mariaProgram("mariadbd"), "--no-defaults", "--datadir="+data, "--socket="+filepath.Join(dir, "sock"),
		"--pid-file="+filepath.Join(dir, "pid"), fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1",
		"--user=root", "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M", "--character-set-server=utf8mb4", "--log-error="+filepath.Join(dir, "error.log"))
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		cleanup()
		return "", fmt.Errorf("mariadbd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	stop := func() {
		_ = srv.Process.Signal(syscall.SIGTERM) // mariadbd shuts down cleanly on SIGTERM
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
		cleanup()
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(mariaDBStart)
	for {
		// Ready when the server answers on its port; the kits' conftests
		// then connect with their own drivers.
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			// A MariaDB greeting starts with a packet header and the
			// protocol version 10.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 5)
			_, rerr := c.Read(b)
			c.Close()
			if rerr == nil && b[4] == 10 {
				break
			}
		}
		select {
		case err := <-exited:
			exited <- err
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			cleanup()
			return "", fmt.Errorf("mariadbd exited: %v\n%s%s", err, log.String(), mariaTail(string(errLog)))
		default:
		}
		if time.Now().After(deadline) {
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			stop()
			return "", fmt.Errorf("mariadbd not ready on %s within %s\n%s", addr, mariaDBStart, mariaTail(string(errLog)))
		}
		time.Sleep(50 * time.Millisecond) // polling the port with a deadline, not synchronising
	}
	atExit(stop)
	return addr, nil
}

// mariaProgram finds a MariaDB program on PATH or in /usr/sbin, where
// Debian puts mariadbd (not on every user's PATH); "" when it is in neither.
func mariaProgram(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// mariaRunBounded runs cmd, killing it after d.
func mariaRunBounded(cmd *exec.Cmd, d time.Duration) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("not done within %s", d)
	}
}

func mariaFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func mariaTail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
