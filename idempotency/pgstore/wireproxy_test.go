package pgstore_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// wireProxy stands between a pool and PostgreSQL and, once armed, holds
// back the server's answer to the next COMMIT: the server has committed,
// the client does not know it yet. The test then ends that connection the
// way a failure after the commit would: the server terminates the session
// (its FATAL reaches the client in place of the COMMIT's answer), or the
// connection breaks.
type wireProxy struct {
	ln              net.Listener
	network, target string
	armed           atomic.Bool
	held            chan heldCommit

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// heldCommit is a connection whose COMMIT answer the proxy holds.
type heldCommit struct {
	pid uint32 // its server session
	cut func() // breaks the connection
}

// newWireProxy starts a proxy to the server of url and returns a pool
// through it (MaxConns 8), both closed when the test ends.
func newWireProxy(t *testing.T, url string) (*wireProxy, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p := &wireProxy{network: "tcp", held: make(chan heldCommit, 1), conns: []net.Conn{}}
	host, port := cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))
	p.target = net.JoinHostPort(host, port)
	if strings.HasPrefix(host, "/") {
		p.network, p.target = "unix", host+"/.s.PGSQL."+port
	}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	p.wg.Add(1)
	go p.accept()
	addr := p.ln.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(addr.Port)
	// Plain protocol messages, which the proxy reads.
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return p, pool
}

// arm makes the proxy hold the answer to the next COMMIT and send its
// connection on held.
func (p *wireProxy) arm() { p.armed.Store(true) }

func (p *wireProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false // closed
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *wireProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *wireProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial(p.network, p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.answers(client, server)
			client.Close()
		}()
	}
}

// answers forwards the server's messages to the client, one by one:
// type byte, length, body. Once it holds a COMMIT's answer it drops
// everything but an error, which the server sends when it terminates the
// session.
func (p *wireProxy) answers(client, server net.Conn) {
	r := bufio.NewReader(server)
	var pid uint32
	holding := false
	head := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n < 4 {
			return
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		switch {
		case head[0] == 'K' && len(body) >= 4: // BackendKeyData
			pid = binary.BigEndian.Uint32(body)
		case !holding && head[0] == 'C' && string(body) == "COMMIT\x00" && p.armed.CompareAndSwap(true, false):
			holding = true
			p.held <- heldCommit{pid: pid, cut: func() { client.Close() }}
		}
		if holding && head[0] != 'E' {
			continue
		}
		if _, err := client.Write(append(head, body...)); err != nil {
			return
		}
	}
}
