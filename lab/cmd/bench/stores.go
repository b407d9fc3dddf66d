package main

// The stores beside PostgreSQL (issue 26), in the same side-by-side form
// as (a)-(c): payonce's path against the raw limit of the same engine, in
// the same run, medians of interleaved rounds, clients goroutines.
//
//	(r) Redis, one standalone redis-server started by redistest, with the
//	    persistence redisstore's doc recommends (appendonly yes,
//	    appendfsync everysec):
//	    raw claim+complete: redisstore's own claim and complete Lua
//	    scripts (their source read from the package, checked against the
//	    server's script cache) run with EVALSHA from a plain go-redis
//	    client, the same keys and arguments as the store sends;
//	    sdk claim+complete: Executor.Do on redisstore, new keys;
//	    raw replay: the claim script EVALSHA'd on a completed key (what a
//	    replay costs the server: the store's one round trip);
//	    sdk replay: Executor.Do of a completed key, without the replay
//	    cache (with it, the figure is the cache's, as (c) shows).
//	(y) DynamoDB, dynalite started by dynamotest:
//	    raw claim+complete: PutItem conditioned on attribute_not_exists,
//	    then the completing UpdateItem, from a plain aws-sdk-go-v2 client,
//	    with the store's item shape and expressions;
//	    sdk claim+complete: Executor.Do on dynamostore, new keys;
//	    raw replay: a strongly consistent GetItem of a completed item;
//	    sdk replay: Executor.Do of a completed key, without the cache.
//
// The ratio lines take the sdk path's median over the raw one's.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/payonce/payonce/idempotency"
	"github.com/payonce/payonce/idempotency/dynamostore"
	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
	"github.com/payonce/payonce/idempotency/redisstore"
	"github.com/payonce/payonce/idempotency/redisstore/redistest"
)

const (
	// redisReplayKeys and dynamoReplayKeys completed records are seeded
	// (through the store, so that they are what Do writes) for the replay
	// paths.
	redisReplayKeys  = 20_000
	dynamoReplayKeys = 2_000
	storeLock        = 30 * time.Second
	storeRetention   = 24 * time.Hour
)

var benchHeader = map[string][]string{"Content-Type": {"application/json"}}

// benchStores measures the Redis and DynamoDB stores and prints their
// lines and ratio lines. It starts and stops its servers.
func benchStores(ctx context.Context, d time.Duration, rounds int) error {
	fp, err := benchFingerprint()
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Printf("\nstores: load average before %s\n", loadavg())
	only := os.Getenv("BENCH_STORES") // "redis", "cluster" or "dynamo": that one alone
	if only == "cluster" {
		return benchRedisCluster(ctx, fp, d, rounds)
	}
	var r, y storeSeries
	if only != "dynamo" {
		if r, err = benchRedis(ctx, fp, d, rounds); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		if err := benchRedisCluster(ctx, fp, d, rounds); err != nil {
			return fmt.Errorf("redis cluster: %w", err)
		}
	}
	if only != "redis" {
		if y, err = benchDynamo(ctx, fp, d, rounds); err != nil {
			return fmt.Errorf("dynamo: %w", err)
		}
	}
	fmt.Printf("stores: load average after %s; %s in all\n", loadavg(), time.Since(start).Round(time.Second))
	for _, s := range append(r.all(), y.all()...) {
		if s != nil {
			fmt.Println(s)
		}
	}
	fmt.Println()
	if r.rawCycle != nil {
		fmt.Printf("ratio redis claim_complete sdk/raw=%.2f\n", r.sdkCycle.median().tps/r.rawCycle.median().tps)
		fmt.Printf("ratio redis replay sdk/raw=%.2f\n", r.sdkReplay.median().tps/r.rawReplay.median().tps)
	}
	if y.rawCycle != nil {
		fmt.Printf("ratio dynamo claim_complete sdk/raw=%.2f\n", y.sdkCycle.median().tps/y.rawCycle.median().tps)
		fmt.Printf("ratio dynamo replay sdk/raw=%.2f\n", y.sdkReplay.median().tps/y.rawReplay.median().tps)
	}
	return nil
}

// storeSeries are one engine's four measured paths.
type storeSeries struct {
	rawCycle, sdkCycle, rawReplay, sdkReplay *series
}

func newStoreSeries(tag, rawCycle, rawReplay string) storeSeries {
	return storeSeries{
		rawCycle:  &series{name: tag + " raw claim+complete " + rawCycle},
		sdkCycle:  &series{name: tag + " sdk claim+complete (Do)"},
		rawReplay: &series{name: tag + " raw replay " + rawReplay},
		sdkReplay: &series{name: tag + " sdk replay, no cache (Do)"},
	}
}

func (s storeSeries) all() []*series {
	return []*series{s.rawCycle, s.sdkCycle, s.rawReplay, s.sdkReplay}
}

// rounds runs the four paths in rounds, raw and sdk in turn first, so
// that neither always runs on the state the other left.
func (s storeSeries) run(d time.Duration, rounds int, rawCycle, sdkCycle func(r int) worker, rawReplay, sdkReplay worker) {
	for r := range rounds {
		fmt.Fprintf(os.Stderr, "  round %d/%d\n", r+1, rounds)
		pairs := [][2]func(){
			{func() { s.rawCycle.add(measure(d, rawCycle(r))) }, func() { s.sdkCycle.add(measure(d, sdkCycle(r))) }},
			{func() { s.rawReplay.add(measure(d, rawReplay)) }, func() { s.sdkReplay.add(measure(d, sdkReplay)) }},
		}
		for _, p := range pairs {
			if r%2 == 1 {
				p[0], p[1] = p[1], p[0]
			}
			p[0]()
			p[1]()
		}
	}
}

func (s *series) add(x sample) { s.samples = append(s.samples, x) }

// doWorker is Do of a new key per call, on any store.
func doWorker(exec *idempotency.Executor, fp idempotency.Fingerprint, prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: scope, Key: fmt.Sprintf("%s%d", prefix, rng.Uint64()), Fingerprint: fp}
		res, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) { return response(), nil })
		if err == nil && res.Replayed {
			return fmt.Errorf("a new key was replayed")
		}
		return err
	}
}

// doReplayWorker is Do of one of the n seeded keys ("1".."n"): a replay,
// or the worker fails.
func doReplayWorker(exec *idempotency.Executor, fp idempotency.Fingerprint, n int) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: scope, Key: strconv.Itoa(1 + rng.IntN(n)), Fingerprint: fp}
		res, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) {
			return idempotency.Response{}, fmt.Errorf("a replay executed")
		})
		if err == nil && !res.Replayed {
			return fmt.Errorf("not a replay")
		}
		return err
	}
}

// seed completes the keys "1".."n" through exec, clients at a time.
func seed(ctx context.Context, exec *idempotency.Executor, fp idempotency.Fingerprint, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for c := range clients {
		wg.Go(func() {
			for k := 1 + c; k <= n; k += clients {
				r := idempotency.Request{Scope: scope, Key: strconv.Itoa(k), Fingerprint: fp}
				if _, err := exec.Do(ctx, r, func(context.Context) (idempotency.Response, error) { return response(), nil }); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func newStoreExecutor(store idempotency.Store) (*idempotency.Executor, error) {
	return idempotency.New(store, &idempotency.Config{LockTimeout: storeLock, Retention: storeRetention})
}

// ---- Redis ----

// redisTarget is one Redis deployment under measurement: a client for the
// store, another for the raw path, the same options.
type redisTarget struct {
	sdk, raw redis.UniversalClient
}

func benchRedis(ctx context.Context, fp idempotency.Fingerprint, d time.Duration, rounds int) (storeSeries, error) {
	fmt.Fprintln(os.Stderr, "redis: starting redis-server (redistest)")
	addr, err := redistest.Start()
	if err != nil {
		return storeSeries{}, err
	}
	defer redistest.Stop()
	opts := func() *redis.Options {
		return &redis.Options{Addr: addr, PoolSize: clients, MinIdleConns: clients, MaintNotificationsConfig: redistest.NoMaintNotifications()}
	}
	t := redisTarget{sdk: redis.NewClient(opts()), raw: redis.NewClient(opts())}
	defer t.sdk.Close()
	defer t.raw.Close()
	if err := redisPersistence(ctx, t.raw); err != nil {
		return storeSeries{}, err
	}
	info, _ := t.raw.Info(ctx, "server").Result()
	fmt.Printf("redis: redis-server %s, standalone, appendonly yes, appendfsync everysec, auto-aof-rewrite off\n",
		infoField(info, "redis_version"))
	return t.measure(ctx, fp, d, rounds, "(r)")
}

// clusterScopes is how many scopes the Redis Cluster line spreads its
// keys over: a scope is one hash slot, so one scope would load one
// primary however many the cluster has.
const clusterScopes = 64

// benchRedisCluster prints the Redis Cluster lines: the sdk
// claim+complete cycle (Do of a new key, over clusterScopes scopes) on a
// local cluster of 1 primary and of 3 primaries, no replicas, in turn, in
// the same run. It shows what spreading the slots over primaries buys on
// this machine, where every primary shares its cores with the others and
// with the benchmark; on separate machines each primary adds its own.
// The nodes run without persistence (redistest's cluster).
func benchRedisCluster(ctx context.Context, fp idempotency.Fingerprint, d time.Duration, rounds int) error {
	var lines []*series
	for _, primaries := range []int{1, 3} {
		s, err := benchRedisClusterOf(ctx, fp, d, rounds, primaries)
		if err != nil {
			return err
		}
		lines = append(lines, s)
	}
	for _, s := range lines {
		fmt.Println(s)
	}
	fmt.Printf("redis cluster claim_complete 1 primary=%.0f/s 3 primaries=%.0f/s\n", lines[0].median().tps, lines[1].median().tps)
	return nil
}

func benchRedisClusterOf(ctx context.Context, fp idempotency.Fingerprint, d time.Duration, rounds, primaries int) (*series, error) {
	fmt.Fprintf(os.Stderr, "redis cluster: starting %d primaries (redistest.StartCluster)\n", primaries)
	c, err := redistest.StartCluster(primaries, 0)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: clients, MinIdleConns: clients,
		MaintNotificationsConfig: redistest.NoMaintNotifications()})
	defer rdb.Close()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		return nil, err
	}
	exec, err := newStoreExecutor(store)
	if err != nil {
		return nil, err
	}
	defer exec.Close()
	_ = measure(time.Second, scopedDoWorker(exec, fp, "cw")) // warm-up, unmeasured
	name := "(rc) sdk claim+complete, 1 primary"
	if primaries > 1 {
		name = fmt.Sprintf("(rc) sdk claim+complete, %d primaries", primaries)
	}
	s := &series{name: name}
	for r := range rounds {
		fmt.Fprintf(os.Stderr, "  round %d/%d\n", r+1, rounds)
		s.add(measure(d, scopedDoWorker(exec, fp, fmt.Sprintf("c%d_", r))))
	}
	return s, nil
}

// scopedDoWorker is doWorker over clusterScopes scopes.
func scopedDoWorker(exec *idempotency.Executor, fp idempotency.Fingerprint, prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		r := idempotency.Request{Scope: fmt.Sprintf("%s%d", scope, rng.IntN(clusterScopes)), Key: fmt.Sprintf("%s%d", prefix, rng.Uint64()), Fingerprint: fp}
		res, err := exec.Do(ctx, r, func(ctx context.Context) (idempotency.Response, error) { return response(), nil })
		if err == nil && res.Replayed {
			return fmt.Errorf("a new key was replayed")
		}
		return err
	}
}

// redisPersistence turns on what redisstore's doc recommends,
// appendonly yes with appendfsync everysec (redistest starts the server
// without persistence), and waits for the first rewrite that creates the
// append-only file. Automatic rewrites are turned off: a rewrite forks
// the server, and would land in one path's run only.
func redisPersistence(ctx context.Context, rdb redis.UniversalClient) error {
	for _, kv := range [][2]string{{"appendfsync", "everysec"}, {"auto-aof-rewrite-percentage", "0"}, {"appendonly", "yes"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			return fmt.Errorf("CONFIG SET %s %s: %w", kv[0], kv[1], err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return fmt.Errorf("waiting for the append-only file: %w", err)
		}
		if infoField(info, "aof_enabled") == "1" && infoField(info, "aof_rewrite_in_progress") == "0" &&
			infoField(info, "aof_rewrite_scheduled") == "0" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the append-only file was not ready in 30s: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// measure runs the four paths on t.
func (t redisTarget) measure(ctx context.Context, fp idempotency.Fingerprint, d time.Duration, rounds int, tag string) (storeSeries, error) {
	store, err := redisstore.New(t.sdk, nil)
	if err != nil {
		return storeSeries{}, err
	}
	exec, err := newStoreExecutor(store)
	if err != nil {
		return storeSeries{}, err
	}
	defer exec.Close()
	fmt.Fprintf(os.Stderr, "redis: seeding %d completed keys\n", redisReplayKeys)
	if err := seed(ctx, exec, fp, redisReplayKeys); err != nil {
		return storeSeries{}, err
	}
	raw, err := newRawRedis(ctx, t.raw, fp)
	if err != nil {
		return storeSeries{}, err
	}
	// Warm-up, unmeasured.
	_ = measure(time.Second, doWorker(exec, fp, "rw"))
	_ = measure(time.Second, raw.cycleWorker("rrw"))

	s := newStoreSeries(tag, "(EVALSHA)", "(EVALSHA claim)")
	s.run(d, rounds,
		func(r int) worker { return raw.cycleWorker(fmt.Sprintf("rr%d_", r)) },
		func(r int) worker { return doWorker(exec, fp, fmt.Sprintf("rs%d_", r)) },
		raw.replayWorker(redisReplayKeys), doReplayWorker(exec, fp, redisReplayKeys))
	return s, nil
}

// rawRedis runs redisstore's claim and complete scripts from a plain
// client, with the arguments the store sends (redisstore.go: Store.claim,
// Store.Complete) for the default key prefix and ExpiredIsNew.
type rawRedis struct {
	rdb                   redis.UniversalClient
	fp                    string
	claimSHA, completeSHA string
	hdr                   []byte
}

const redisPrefix = redisstore.DefaultKeyPrefix

func newRawRedis(ctx context.Context, rdb redis.UniversalClient, fp idempotency.Fingerprint) (*rawRedis, error) {
	dir, err := packageDir("github.com/payonce/payonce/idempotency/redisstore")
	if err != nil {
		return nil, err
	}
	claim, err := luaSource(dir, "claimScript")
	if err != nil {
		return nil, err
	}
	complete, err := luaSource(dir, "completeScript")
	if err != nil {
		return nil, err
	}
	r := &rawRedis{rdb: rdb, fp: string(fp), claimSHA: sha1Hex(claim), completeSHA: sha1Hex(complete)}
	// The store has run both (the seeding): the server's script cache
	// holds them under their SHA-1. Finding ours there proves that the
	// source read is the one the store runs, byte for byte.
	ok, err := rdb.ScriptExists(ctx, r.claimSHA, r.completeSHA).Result()
	if err != nil {
		return nil, err
	}
	if !ok[0] || !ok[1] {
		return nil, fmt.Errorf("the claimScript and completeScript read from %s are not the scripts the store ran (SCRIPT EXISTS: %v): is the source readable as a Go constant expression?", dir, ok)
	}
	if r.hdr, err = json.Marshal(benchHeader); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rawRedis) recordKey(key string) string { return redisPrefix + ":{" + scope + "}:r:" + key }
func (r *rawRedis) dueKey() string              { return redisPrefix + ":{" + scope + "}:due" }
func (r *rawRedis) registryKey() string         { return redisPrefix + ":prune" }

func (r *rawRedis) claim(ctx context.Context, key string, v int64) ([]any, error) {
	return r.rdb.EvalSha(ctx, r.claimSHA, []string{r.recordKey(key), r.dueKey()},
		key, r.fp, storeLock.Milliseconds(), storeRetention.Milliseconds(), 0, "new", v, "create").Slice()
}

// cycleWorker claims a new key and completes it (cycle).
func (r *rawRedis) cycleWorker(prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		return r.cycle(ctx, prefix+strconv.FormatUint(rng.Uint64(), 10), rng.Int64N(1<<30))
	}
}

// cycle claims key, new, at lock version v and completes it with the
// response Do stores, checking each answer.
func (r *rawRedis) cycle(ctx context.Context, key string, v int64) error {
	out, err := r.claim(ctx, key, v)
	if err != nil {
		return err
	}
	if out[0] != "acquired" {
		return fmt.Errorf("raw claim of a new key: %v", out[0])
	}
	ea, err := r.rdb.EvalSha(ctx, r.completeSHA, []string{r.recordKey(key), r.dueKey()},
		out[1], string(idempotency.StatusCompleted), 201, r.hdr, body, storeRetention.Milliseconds(), key).Int64()
	if err != nil {
		return err
	}
	if ea == 0 {
		return fmt.Errorf("raw complete lost its lease")
	}
	// As Store.Complete: the prune registry, in a slot of its own, is a
	// second command.
	return r.rdb.ZAddLT(ctx, r.registryKey(), redis.Z{Score: float64(ea), Member: scope}).Err()
}

// replayWorker runs the claim script on one of the n completed keys.
func (r *rawRedis) replayWorker(n int) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		out, err := r.claim(ctx, strconv.Itoa(1+rng.IntN(n)), rng.Int64N(1<<30))
		if err != nil {
			return err
		}
		if out[0] != "replay" {
			return fmt.Errorf("raw claim of a completed key: %v", out[0])
		}
		return nil
	}
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// packageDir is the folder of an imported package's source.
func packageDir(path string) (string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", path, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// luaSource returns the source of the script held by the package-level
// variable name in the Go package in dir (name = redis.NewScript(expr)),
// expr being a constant string expression: literals, constants of the
// package and +. The bench reads it so that the SDK exports nothing for
// it; newRawRedis checks the result against the server's script cache.
func luaSource(dir, name string) (string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	consts := map[string]ast.Expr{}
	var script ast.Expr
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return "", err
		}
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					switch {
					case gd.Tok == token.CONST:
						consts[id.Name] = vs.Values[i]
					case id.Name == name:
						call, ok := vs.Values[i].(*ast.CallExpr)
						if sel, isSel := callFun(call); !ok || !isSel || sel != "NewScript" || len(call.Args) != 1 {
							return "", fmt.Errorf("%s in %s is not redis.NewScript(source)", name, dir)
						}
						script = call.Args[0]
					}
				}
			}
		}
	}
	if script == nil {
		return "", fmt.Errorf("no variable %s in %s", name, dir)
	}
	var eval func(e ast.Expr, depth int) (string, error)
	eval = func(e ast.Expr, depth int) (string, error) {
		if depth > 32 {
			return "", fmt.Errorf("%s: constants nested too deep", name)
		}
		switch x := e.(type) {
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				return strconv.Unquote(x.Value)
			}
		case *ast.ParenExpr:
			return eval(x.X, depth+1)
		case *ast.Ident:
			if c, ok := consts[x.Name]; ok {
				return eval(c, depth+1)
			}
		case *ast.BinaryExpr:
			if x.Op == token.ADD {
				a, err := eval(x.X, depth+1)
				if err != nil {
					return "", err
				}
				b, err := eval(x.Y, depth+1)
				return a + b, err
			}
		}
		return "", fmt.Errorf("%s: %s is not a constant string expression the bench can read", name, fset.Position(e.Pos()))
	}
	return eval(script, 0)
}

func callFun(call *ast.CallExpr) (string, bool) {
	if call == nil {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	return sel.Sel.Name, true
}

// ---- DynamoDB (dynalite) ----

const dynamoTable = "payonce-bench"

func benchDynamo(ctx context.Context, fp idempotency.Fingerprint, d time.Duration, rounds int) (storeSeries, error) {
	fmt.Fprintln(os.Stderr, "dynamo: starting dynalite (dynamotest; installed with npm on first use)")
	endpoint, err := dynamotest.Start()
	if err != nil {
		return storeSeries{}, err
	}
	defer dynamotest.Stop()
	sdkClient, rawClient := dynamotest.NewClient(endpoint), dynamotest.NewClient(endpoint)
	if err := dynamostore.CreateTable(ctx, sdkClient, dynamoTable); err != nil {
		return storeSeries{}, err
	}
	fmt.Printf("dynamo: dynalite %s (in memory), Node %s\n", dynamotest.Version, nodeVersion())
	store, err := dynamostore.New(ctx, sdkClient, &dynamostore.Config{Table: dynamoTable})
	if err != nil {
		return storeSeries{}, err
	}
	exec, err := newStoreExecutor(store)
	if err != nil {
		return storeSeries{}, err
	}
	defer exec.Close()
	fmt.Fprintf(os.Stderr, "dynamo: seeding %d completed keys\n", dynamoReplayKeys)
	if err := seed(ctx, exec, fp, dynamoReplayKeys); err != nil {
		return storeSeries{}, err
	}
	raw, err := newRawDynamo(rawClient, fp)
	if err != nil {
		return storeSeries{}, err
	}
	_ = measure(time.Second, doWorker(exec, fp, "yw"))
	_ = measure(time.Second, raw.cycleWorker("yrw"))

	s := newStoreSeries("(y)", "(Put+Update)", "(GetItem)")
	s.run(d, rounds,
		func(r int) worker { return raw.cycleWorker(fmt.Sprintf("yr%d_", r)) },
		func(r int) worker { return doWorker(exec, fp, fmt.Sprintf("ys%d_", r)) },
		raw.replayWorker(dynamoReplayKeys), doReplayWorker(exec, fp, dynamoReplayKeys))
	return s, nil
}

// rawDynamo writes and reads dynamostore's item shape (dynamostore.go:
// Store.put; ops.go: Store.Complete, Store.read) from a plain client, with
// the store's default skew buffer and ExpiredIsNew.
type rawDynamo struct {
	db  *dynamodb.Client
	fp  string
	hdr []byte
}

func newRawDynamo(db *dynamodb.Client, fp idempotency.Fingerprint) (*rawDynamo, error) {
	hdr, err := json.Marshal(benchHeader)
	return &rawDynamo{db: db, fp: string(fp), hdr: hdr}, err
}

func dS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func dN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func dynamoPK(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": dS("r#" + scope + "#" + key)}
}

// purge is the store's TTL for an instant in ms: plus the skew buffer,
// rounded up to seconds, plus one.
func purge(ms int64) int64 { return (ms+dynamostore.DefaultSkewBuffer.Milliseconds()+999)/1000 + 1 }

// cycleWorker claims a new key and completes it (cycle).
func (r *rawDynamo) cycleWorker(prefix string) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		return r.cycle(ctx, prefix+strconv.FormatUint(rng.Uint64(), 10), rng.Int64N(1<<30))
	}
}

// cycle puts key's PROCESSING item at lock version v, conditioned on its
// absence, and completes it with the response Do stores, conditioned on
// the status and version, as the store does.
func (r *rawDynamo) cycle(ctx context.Context, key string, v int64) error {
	now := time.Now().UnixMilli()
	ea, lu := now+storeRetention.Milliseconds(), now+storeLock.Milliseconds()
	item := dynamoPK(key)
	for k, a := range map[string]types.AttributeValue{
		"sc": dS(scope), "k": dS(key), "fp": dS(r.fp), "st": dS(string(idempotency.StatusProcessing)),
		"v": dN(v), "lu": dN(lu), "ca": dN(now), "ea": dN(ea), "rf": dN(0), "rfs": dN(0), "purge": dN(purge(max(ea, lu))),
	} {
		item[k] = a
	}
	if _, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(dynamoTable), Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": "pk"},
	}); err != nil {
		return fmt.Errorf("raw claim: %w", err)
	}
	now = time.Now().UnixMilli()
	ea = now + storeRetention.Milliseconds()
	_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(dynamoTable), Key: dynamoPK(key),
		UpdateExpression:    aws.String("SET #st = :st, #code = :code, #co = :co, #ea = :ea, #lu = :zero, #purge = :purge + #rfs, #hdr = :hdr, #body = :body"),
		ConditionExpression: aws.String("#st = :processing AND #v = :v"),
		ExpressionAttributeNames: map[string]string{"#st": "st", "#v": "v", "#code": "code", "#co": "co", "#ea": "ea",
			"#lu": "lu", "#purge": "purge", "#rfs": "rfs", "#hdr": "hdr", "#body": "body"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":processing": dS(string(idempotency.StatusProcessing)), ":v": dN(v),
			":st": dS(string(idempotency.StatusCompleted)), ":code": dN(201), ":co": dN(now), ":ea": dN(ea),
			":zero": dN(0), ":purge": dN(purge(ea)),
			":hdr": &types.AttributeValueMemberB{Value: r.hdr}, ":body": &types.AttributeValueMemberB{Value: body}},
	})
	if err != nil {
		return fmt.Errorf("raw complete: %w", err)
	}
	return nil
}

// replayWorker reads one of the n completed items, as the store reads a
// record: strongly consistent.
func (r *rawDynamo) replayWorker(n int) worker {
	return func(ctx context.Context, rng *rand.Rand, i int) error {
		out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(dynamoTable),
			Key: dynamoPK(strconv.Itoa(1 + rng.IntN(n))), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return err
		}
		if st, _ := out.Item["st"].(*types.AttributeValueMemberS); st == nil || st.Value != string(idempotency.StatusCompleted) {
			return fmt.Errorf("raw read of a completed key: not COMPLETED")
		}
		return nil
	}
}

func nodeVersion() string {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
