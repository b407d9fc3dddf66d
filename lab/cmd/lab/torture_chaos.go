package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// The torture's faults: Toxiproxy between the workers and PostgreSQL and
// between the workers and each provider's fake, its toxics added and
// removed at seeded random instants; workers killed at random; a load
// balancer in front of the workers.

// toxiproxyPackage is Toxiproxy's server, a tool of payonce's module
// (go.mod), built for each run like the worker.
const toxiproxyPackage = "github.com/Shopify/toxiproxy/v2/cmd/server"

// toxi is a running Toxiproxy server and its proxies by name.
type toxi struct {
	cmd     *exec.Cmd
	client  *toxiproxy.Client
	proxies map[string]*toxiproxy.Proxy
}

// startToxiproxy runs Toxiproxy's server (exe) on a free loopback port,
// seeded (its toxicity draws), logging to logs.
func startToxiproxy(exe string, seed uint64, logs *os.File) (*toxi, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-host", "127.0.0.1", "-port", strconv.Itoa(port), "-seed", strconv.FormatUint(seed>>1, 10))
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &toxi{cmd: cmd, client: toxiproxy.NewClient(fmt.Sprintf("127.0.0.1:%d", port)), proxies: map[string]*toxiproxy.Proxy{}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := t.client.Proxies(); err == nil {
			return t, nil
		} else if time.Now().After(deadline) {
			t.stop()
			return nil, fmt.Errorf("toxiproxy did not answer on port %d within 30s: %w", port, err)
		}
	}
}

// proxy creates a proxy to upstream (host:port) on a free loopback port
// and returns its address.
func (t *toxi) proxy(name, upstream string) (string, error) {
	p, err := t.client.CreateProxy(name, "127.0.0.1:0", upstream)
	if err != nil {
		return "", fmt.Errorf("toxiproxy: proxy %s to %s: %w", name, upstream, err)
	}
	if _, port, err := net.SplitHostPort(p.Listen); err != nil || port == "0" {
		return "", fmt.Errorf("toxiproxy: proxy %s listens on %q", name, p.Listen)
	}
	t.proxies[name] = p
	return p.Listen, nil
}

func (t *toxi) stop() {
	_ = t.cmd.Process.Kill()
	_ = t.cmd.Wait()
}

// faultKinds are the toxics the chaos draws from, with their attributes
// and how long each stays on. Upstream faults cut requests before they
// arrive; downstream ones lose or slow the answers of work already done
// (a provider's committed charge, a committed transaction).
var faultKinds = []struct {
	name  string
	toxic func(r *rand.Rand) (kind, stream string, attrs toxiproxy.Attributes)
	span  [2]time.Duration // how long the toxic stays, drawn in [min, max)
}{
	{"latency", func(r *rand.Rand) (string, string, toxiproxy.Attributes) {
		return "latency", stream(r), toxiproxy.Attributes{"latency": 20 + r.IntN(280), "jitter": r.IntN(100)}
	}, [2]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond}},
	{"reset", func(r *rand.Rand) (string, string, toxiproxy.Attributes) {
		return "reset_peer", stream(r), toxiproxy.Attributes{"timeout": r.IntN(50)}
	}, [2]time.Duration{50 * time.Millisecond, 300 * time.Millisecond}},
	{"timeout", func(r *rand.Rand) (string, string, toxiproxy.Attributes) {
		// Data stops flowing; the connection is closed after the timeout.
		return "timeout", stream(r), toxiproxy.Attributes{"timeout": 100 + r.IntN(900)}
	}, [2]time.Duration{200 * time.Millisecond, 1200 * time.Millisecond}},
	{"bandwidth", func(r *rand.Rand) (string, string, toxiproxy.Attributes) {
		return "bandwidth", stream(r), toxiproxy.Attributes{"rate": 4 + r.IntN(60)} // KB/s
	}, [2]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond}},
	{"slicer", func(r *rand.Rand) (string, string, toxiproxy.Attributes) {
		// Answers cut into small TCP segments, delayed: parsers see partial reads.
		return "slicer", stream(r), toxiproxy.Attributes{"average_size": 8 + r.IntN(64), "size_variation": 4, "delay": r.IntN(2000)}
	}, [2]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond}},
	{"limit_data", func(r *rand.Rand) (string, string, toxiproxy.Attributes) {
		// The connection closes after a few hundred bytes: answers cut short.
		return "limit_data", "downstream", toxiproxy.Attributes{"bytes": 64 + r.IntN(512)}
	}, [2]time.Duration{50 * time.Millisecond, 400 * time.Millisecond}},
}

func stream(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return "upstream"
	}
	return "downstream"
}

// faultCounts counts the faults injected, by link and kind.
type faultCounts struct {
	mu sync.Mutex
	n  map[[2]string]int // {link, kind}
	// errors: toxics Toxiproxy refused to add or remove (never expected).
	errors []string
}

func (f *faultCounts) add(link, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[[2]string]int{}
	}
	f.n[[2]string{link, kind}]++
}

func (f *faultCounts) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, err.Error())
}

// byKind returns the faults per kind, and the total.
func (f *faultCounts) byKind() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, n := range f.n {
		out[k[1]] += n
		total += n
	}
	return out, total
}

// byLink returns the faults per link.
func (f *faultCounts) byLink() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, n := range f.n {
		out[k[0]] += n
	}
	return out
}

// chaos injects faults on every proxy until ctx ends: on each link, one
// toxic at a time, after a gap drawn around gap, of a kind drawn from
// faultKinds, with a toxicity (the share of the link's connections it
// hits) between 0.3 and 1. Each link draws from its own seeded source.
// It removes every toxic before returning.
func (t *toxi) chaos(ctx context.Context, seed uint64, gap time.Duration, counts *faultCounts) {
	names := make([]string, 0, len(t.proxies))
	for name := range t.proxies {
		names = append(names, name)
	}
	sort.Strings(names)
	var wg sync.WaitGroup
	for i, name := range names {
		p := t.proxies[name]
		r := rand.New(rand.NewPCG(seed, uint64(i+1)*0x9e3779b97f4a7c15))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if !sleepCtx(ctx, time.Duration(float64(gap)*(0.25+1.5*r.Float64()))) {
					return
				}
				f := faultKinds[r.IntN(len(faultKinds))]
				kind, stream, attrs := f.toxic(r)
				toxic := fmt.Sprintf("%s-%d", f.name, n)
				if _, err := p.AddToxic(toxic, kind, stream, 0.3+0.7*r.Float32(), attrs); err != nil {
					counts.fail(fmt.Errorf("%s: adding %s: %w", name, toxic, err))
					continue
				}
				counts.add(name, f.name)
				span := f.span[0] + time.Duration(r.Int64N(int64(f.span[1]-f.span[0])))
				sleepCtx(ctx, span)
				if err := p.RemoveToxic(toxic); err != nil {
					counts.fail(fmt.Errorf("%s: removing %s: %w", name, toxic, err))
				}
			}
		}()
	}
	wg.Wait()
}

// sleepCtx sleeps d, or less if ctx ends; it reports whether ctx is live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// killer SIGKILLs a worker drawn at random, every gap or so, leaves it
// down for up to a second and restarts it, until ctx ends. A worker that
// fails to start (its database link is faulty too) is started again.
func killer(ctx context.Context, seed uint64, gap time.Duration, ws []*worker, kills *atomic.Int64) error {
	r := rand.New(rand.NewPCG(seed, 0x4b111))
	for {
		if !sleepCtx(ctx, time.Duration(float64(gap)*(0.25+1.5*r.Float64()))) {
			return nil
		}
		w := ws[r.IntN(len(ws))]
		down := time.Duration(100+r.IntN(900)) * time.Millisecond
		kills.Add(1)
		err := w.killFor(down)
		for tries := 1; err != nil; tries++ {
			if tries == 20 {
				return fmt.Errorf("restarting worker %s after its kill: %w", w.addr, err)
			}
			time.Sleep(500 * time.Millisecond)
			err = w.start()
		}
	}
}

// balancer is the load balancer in front of the workers: each request
// goes to a worker drawn at random; a dead one's requests fail with 502,
// as behind a real balancer between two health checks.
func balancer(ws []*worker, seed uint64) http.Handler {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 0xba1))
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			mu.Lock()
			w := ws[r.IntN(len(ws))]
			mu.Unlock()
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", w.addr
			pr.Out.Host = w.addr
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client gave up
			}
			http.Error(w, "worker unreachable: "+err.Error(), http.StatusBadGateway)
		},
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
