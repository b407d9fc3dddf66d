package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the cluster-node-timeout of the clusters StartCluster
// starts: a primary that does not answer for this long is marked failed
// and its replica promoted, within about twice this time.
const NodeTimeout = 1500 * time.Millisecond

// clusterTimeout bounds the creation of a cluster, and a failover.
const clusterTimeout = 60 * time.Second

// Cluster is a Redis Cluster of local redis-server processes, started by
// [StartCluster]. Stop it with [Cluster.Stop].
type Cluster struct {
	// Addrs holds every node's address ("127.0.0.1:port"), primaries and
	// replicas, in no particular order.
	Addrs []string

	dir   string
	mu    sync.Mutex
	nodes map[string]*process // by address; a killed node is gone
	dirs  map[string]string   // every node's directory, by address
	bus   map[string]int      // every node's cluster bus port, by address
}

var cluster *Cluster // the test binary's shared one, see ClusterClient

// StartCluster starts a Redis Cluster of primaries primaries with
// replicas replicas each, on free loopback ports, without persistence,
// with a cluster-node-timeout of NodeTimeout. It creates the cluster with
// `redis-cli --cluster create` (with fewer than 3 primaries, which that
// refuses, by CLUSTER ADDSLOTSRANGE and MEET) and returns once every node reports
// cluster_state:ok, knows every other node, and every primary has its
// replicas connected. Each server runs in a process group of its own and
// dies with the calling process (on Linux); [Cluster.Stop] kills them and
// removes their directories. Everything is bounded in time (a minute).
//
// It is for tests and benchmarks, test binary or not; see
// [ClusterClient] and [NewCluster] for tests.
func StartCluster(primaries, replicas int) (*Cluster, error) {
	if primaries < 1 || replicas < 0 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 1 primary and no negative replicas, got %d and %d", primaries, replicas)
	}
	if primaries < 3 && replicas > 0 {
		// redis-cli --cluster create refuses fewer than 3 primaries
		// with replicas, and Cluster's failover needs a majority of
		// primaries anyway.
		return nil, fmt.Errorf("redistest: a cluster with replicas needs at least 3 primaries, got %d", primaries)
	}
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	cli, err := cliBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, nodes: map[string]*process{}, dirs: map[string]string{}, bus: map[string]int{}}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	n := primaries * (1 + replicas)
	for i := range n {
		ndir := filepath.Join(dir, strconv.Itoa(i))
		p, bus, err := startNode(bin, ndir)
		if err != nil {
			return nil, err
		}
		c.nodes[p.addr], c.dirs[p.addr], c.bus[p.addr] = p, ndir, bus
		c.Addrs = append(c.Addrs, p.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if primaries < 3 {
		// redis-cli --cluster create refuses fewer than 3 primaries:
		// assign the slots and introduce the nodes by hand.
		if err := c.assign(ctx); err != nil {
			return nil, err
		}
	} else {
		args := append([]string{"--cluster", "create"}, c.Addrs...)
		args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
		if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v; its output:\n%s", err, out)
		}
	}
	if err := c.waitHealthy(ctx, "", primaries, replicas); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// assign splits the 16384 slots evenly over the nodes, all primaries,
// and has each meet the first (CLUSTER SET-CONFIG-EPOCH, ADDSLOTSRANGE,
// MEET).
func (c *Cluster) assign(ctx context.Context) error {
	const slots = 16384
	host, port := splitAddr(c.Addrs[0])
	for i, addr := range c.Addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, MaintNotificationsConfig: NoMaintNotifications()})
		lo, hi := i*slots/len(c.Addrs), (i+1)*slots/len(c.Addrs)-1
		// Distinct config epochs, as redis-cli gives them: nodes that
		// claim slots at the same epoch do not settle who owns what.
		err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		if err == nil {
			err = rdb.ClusterAddSlotsRange(ctx, lo, hi).Err()
		}
		if err == nil && i > 0 {
			// The bus port is not port+10000 here: MEET names it.
			err = rdb.Do(ctx, "CLUSTER", "MEET", host, port, c.bus[c.Addrs[0]]).Err()
		}
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: assigning slots %d-%d to %s: %w", lo, hi, addr, err)
		}
	}
	return nil
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// startNode starts one cluster node in dir (created here), on two free
// ports (the client's and the cluster bus'), trying other ports when one
// was taken meanwhile.
func startNode(bin, dir string) (*process, int, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, 0, err
		}
		bus, err := freePort()
		if err != nil {
			return nil, 0, err
		}
		p, err := startClusterNode(bin, port, bus, dir)
		if err == nil {
			return p, bus, nil
		}
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
		last = err
	}
	return nil, 0, last
}

func startClusterNode(bin string, port, bus int, dir string) (*process, error) {
	return startOn(bin, port, dir, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.Itoa(int(NodeTimeout.Milliseconds())),
		"--cluster-announce-ip", "127.0.0.1")
}

// Restart starts the killed node at addr again, on its ports and with its
// cluster configuration (nodes.conf): a primary that was failed over
// rejoins as a replica of the node promoted in its place. Restart returns
// once the node is a replica with its link to its primary up, bounded by
// ctx and by a minute.
func (c *Cluster) Restart(ctx context.Context, addr string) error {
	bin, err := binary()
	if err != nil {
		return err
	}
	c.mu.Lock()
	if _, running := c.nodes[addr]; running {
		c.mu.Unlock()
		return fmt.Errorf("redistest: node %s is running", addr)
	}
	_, portText, _ := strings.Cut(addr, ":")
	port, _ := strconv.Atoi(portText)
	p, err := startClusterNode(bin, port, c.bus[addr], c.dirs[addr])
	if err == nil {
		c.nodes[addr] = p
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	for {
		repl, err := rdb.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(repl, "role:slave") && strings.Contains(repl, "master_link_status:up") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: restarted node %s not a replica with its link up: %w (last: %v %q)", addr, ctx.Err(), err, repl)
		case <-time.After(50 * time.Millisecond): // poll the node again
		}
	}
}

func cliBinary() (string, error) {
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p, nil
	}
	const debian = "/usr/bin/redis-cli"
	if _, err := os.Stat(debian); err != nil {
		return "", fmt.Errorf("no redis-cli in PATH nor at %s: install Debian's redis-tools package (apt-get install redis-tools)", debian)
	}
	return debian, nil
}

// Client returns a new client of the cluster; the caller closes it.
// Maintenance notifications are off (see NoMaintNotifications).
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaintNotificationsConfig: NoMaintNotifications()})
}

// Stop kills every node still running (its process group) and removes the
// nodes' directories. It may be called more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, p := range c.nodes {
		p.stop()
		delete(c.nodes, addr)
	}
	_ = os.RemoveAll(c.dir)
}

// Kill kills the node at addr with SIGKILL, as a crash would, and waits
// for its process to exit.
func (c *Cluster) Kill(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.nodes[addr]
	if !ok {
		return fmt.Errorf("redistest: no running node at %s", addr)
	}
	p.stop()
	delete(c.nodes, addr)
	return nil
}

// WaitFailover waits until every running node has marked the killed node
// at dead as failed and reports cluster_state:ok again, its slots served
// by a promoted replica, bounded by ctx and by a minute.
func (c *Cluster) WaitFailover(ctx context.Context, dead string) error {
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	return c.waitHealthy(ctx, dead, 0, 0)
}

// Node is a cluster node as CLUSTER NODES describes it.
type Node struct {
	ID, Addr string
	Primary  bool
	Failed   bool
	// PrimaryID is the ID of a replica's primary.
	PrimaryID string
}

// Nodes returns the cluster's nodes as the node at addr sees them.
func (c *Cluster) Nodes(ctx context.Context, addr string) ([]Node, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	txt, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseNodes(txt), nil
}

func parseNodes(txt string) []Node {
	var nodes []Node
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		addr := f[1]
		if i := strings.IndexByte(addr, '@'); i >= 0 {
			addr = addr[:i]
		}
		flags := "," + f[2] + ","
		n := Node{ID: f[0], Addr: addr, Primary: strings.Contains(flags, ",master,"),
			Failed: strings.Contains(flags, ",fail,")}
		if f[3] != "-" {
			n.PrimaryID = f[3]
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// waitHealthy polls every running node until it reports cluster_state:ok
// and sees every other running node; with dead set, until it also sees
// that node failed (and the state ok says that every slot is served,
// so by a promoted replica). With primaries set (on
// creation), until the nodes see that many primaries, each with its
// replicas connected.
func (c *Cluster) waitHealthy(ctx context.Context, dead string, primaries, replicas int) error {
	c.mu.Lock()
	var addrs []string
	for a := range c.nodes {
		addrs = append(addrs, a)
	}
	c.mu.Unlock()
	clients := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		defer clients[i].Close()
	}
	var why error
	healthy := func() bool {
		for i, rdb := range clients {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				why = fmt.Errorf("node %s: CLUSTER INFO: %w", addrs[i], err)
				return false
			}
			if !strings.Contains(info, "cluster_state:ok") {
				why = fmt.Errorf("node %s: not cluster_state:ok", addrs[i])
				return false
			}
			txt, err := rdb.ClusterNodes(ctx).Result()
			if err != nil {
				why = fmt.Errorf("node %s: CLUSTER NODES: %w", addrs[i], err)
				return false
			}
			seen, masters := 0, 0
			for _, n := range parseNodes(txt) {
				switch {
				case n.Addr == dead:
					if !n.Failed {
						why = fmt.Errorf("node %s does not see %s failed yet", addrs[i], dead)
						return false
					}
				case n.Failed:
					why = fmt.Errorf("node %s sees %s failed", addrs[i], n.Addr)
					return false
				default:
					seen++
					if n.Primary {
						masters++
					}
				}
			}
			if seen != len(addrs) || primaries > 0 && masters != primaries {
				why = fmt.Errorf("node %s sees %d running nodes (%d primaries), want %d (%d)", addrs[i], seen, masters, len(addrs), primaries)
				return false
			}
			if primaries > 0 && replicas > 0 {
				repl, err := rdb.Info(ctx, "replication").Result()
				if err != nil {
					why = fmt.Errorf("node %s: INFO replication: %w", addrs[i], err)
					return false
				}
				if strings.Contains(repl, "role:master") && !strings.Contains(repl, "connected_slaves:"+strconv.Itoa(replicas)+"\r\n") ||
					strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
					why = fmt.Errorf("node %s: replication not settled", addrs[i])
					return false
				}
			}
		}
		return true
	}
	for !healthy() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not healthy: %w (last: %v)", ctx.Err(), why)
		case <-time.After(50 * time.Millisecond): // poll the nodes again
		}
	}
	return nil
}

// ClusterClient returns a new client of the test binary's shared cluster
// (3 primaries with 1 replica each), starting it on first use; the client
// is closed when the test ends, the cluster by [Stop] (or [Main]). Tests
// share it and keep apart by key prefix ([Prefix]); a test that kills
// nodes starts its own with [NewCluster].
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	mu.Lock()
	if cluster == nil {
		c, err := StartCluster(3, 1)
		if err != nil {
			mu.Unlock()
			t.Fatalf("redistest: %v", err)
		}
		cluster = c
	}
	c := cluster
	mu.Unlock()
	rdb := c.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// NewCluster starts a cluster of the test's own (see [StartCluster]),
// stopped when the test ends.
func NewCluster(t testing.TB, primaries, replicas int) *Cluster {
	t.Helper()
	c, err := StartCluster(primaries, replicas)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// errNoNode is returned by PrimaryFor when no node serves a key.
var errNoNode = errors.New("redistest: no primary serves the key")

// PrimaryFor returns the address of the primary that serves key, as the
// cluster client rdb sees it.
func PrimaryFor(ctx context.Context, rdb *redis.ClusterClient, key string) (string, error) {
	n, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	if n == nil {
		return "", errNoNode
	}
	return n.Options().Addr, nil
}
