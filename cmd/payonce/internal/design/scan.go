package design

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Finding is something a scan saw at a place in the code: a route, a
// payment call, a consumer, a cron job, or an anti-pattern.
type Finding struct {
	Pos    string // file:line, the file as reached from the scanned directory
	Kind   string
	Detail string
}

// Finding kinds.
const (
	KindRoute       = "route"
	KindPayment     = "payment call"
	KindConsumer    = "consumer"
	KindCron        = "cron job"
	APNoKey         = "provider call with no idempotency key"
	APRandomRef     = "random or time-based provider reference or key"
	APInsertNoGuard = "handler inserts without ON CONFLICT"
	APLockNoTimeout = "lock with no timeout"
	APLocalLock     = "process-local lock around an insert"
)

// ScanResult is what a scan of a Go module tells.
type ScanResult struct {
	Dir          string
	Routes       []Finding // method + pattern in Detail
	Payments     []Finding // provider in Detail
	Consumers    []Finding
	Crons        []Finding
	AntiPatterns []Finding
	Frameworks   []string
	Providers    []string
	Broker       []string
	Database     string
}

// Scan inspects the Go files under dir (skipping vendor, testdata and test
// files) with go/ast.
func Scan(dir string) (*ScanResult, error) {
	res := &ScanResult{Dir: dir}
	fw, prov, brk := map[string]bool{}, map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			n := e.Name()
			if path != dir && (n == "vendor" || n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		scanFile(res, fset, filepath.ToSlash(path), f, fw, prov, brk)
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Frameworks, res.Providers, res.Broker = keys(fw), keys(prov), keys(brk)
	return res, nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var routeMethods = map[string]string{
	"Get": "GET", "Post": "POST", "Put": "PUT", "Patch": "PATCH", "Delete": "DELETE",
	"GET": "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE",
}

var keyName = regexp.MustCompile(`(?i)(idem|reference|requestid|request_id|key)`)

func scanFile(res *ScanResult, fset *token.FileSet, rel string, f *ast.File, fw, prov, brk map[string]bool) {
	imports := map[string]string{} // local name -> path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if strings.HasPrefix(name, "v") && len(name) <= 3 && strings.Contains(p, "/") { // stripe-go/v79
			q := strings.TrimSuffix(p, "/"+name)
			name = q[strings.LastIndex(q, "/")+1:]
		}
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
		switch {
		case strings.Contains(p, "go-chi/chi"):
			fw["chi"] = true
		case strings.Contains(p, "gin-gonic/gin"):
			fw["gin"] = true
		case strings.Contains(p, "labstack/echo"):
			fw["echo"] = true
		case p == "net/http":
			fw["net/http"] = true
		case strings.Contains(p, "stripe/stripe-go"):
			prov["stripe"] = true
		case strings.Contains(p, "riverqueue/river"):
			brk["River"] = true
		case strings.Contains(p, "nats-io/nats.go"):
			brk["NATS"] = true
		case strings.Contains(p, "kafka") || strings.Contains(p, "sarama"):
			brk["Kafka"] = true
		case strings.Contains(p, "amqp"):
			brk["AMQP"] = true
		case strings.Contains(p, "jackc/pgx") || strings.Contains(p, "lib/pq"):
			res.Database = "PostgreSQL"
		}
	}
	has := func(sub string) bool {
		for _, p := range imports {
			if strings.Contains(p, sub) {
				return true
			}
		}
		return false
	}
	pos := func(n ast.Node) string { return fmt.Sprintf("%s:%d", rel, fset.Position(n.Pos()).Line) }
	add := func(list *[]Finding, n ast.Node, kind, detail string) {
		*list = append(*list, Finding{Pos: pos(n), Kind: kind, Detail: detail})
	}

	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		// River worker: func (w *W) Work(ctx, job *river.Job[T]) error.
		if fd.Name.Name == "Work" && fd.Recv != nil && has("riverqueue/river") && fd.Type.Params != nil && len(fd.Type.Params.List) == 2 {
			add(&res.Consumers, fd, KindConsumer, "River worker "+recvName(fd)+".Work")
		}
		handler := isHandler(fd.Type)
		var lits []string
		var litNodes []*ast.BasicLit
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				s, _ := strconv.Unquote(bl.Value)
				lits = append(lits, s)
				litNodes = append(litNodes, bl)
			}
			return true
		})
		body := strings.Join(lits, "\n")
		// tainted: variables holding a random or time value, and whether
		// their assignment was already flagged (named like a key).
		tainted := map[string]bool{}
		randomKey := func(n ast.Node, what string, e ast.Expr) {
			if c := randomCall(e); c != nil {
				add(&res.AntiPatterns, c, APRandomRef, what+" from "+exprString(c.Fun)+": every retry gets a new value, so nothing is deduplicated")
				return
			}
			if id, ok := e.(*ast.Ident); ok {
				if flagged, ok := tainted[id.Name]; ok && !flagged {
					add(&res.AntiPatterns, n, APRandomRef, what+" from "+id.Name+", a random or time value made at each attempt: every retry gets a new key, so nothing is deduplicated")
				}
			}
		}
		var locks []*ast.CallExpr
		fnHasKey := strings.Contains(body, "Idempotency-Key") || strings.Contains(body, "PayPal-Request-Id")
		// Calls.
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				name := sel.Sel.Name
				recv := exprName(sel.X)
				switch {
				case name == "SetIdempotencyKey" && len(x.Args) == 1:
					randomKey(x, exprString(sel), x.Args[0])
				case name == "Set" && len(x.Args) == 2 && strings.EqualFold(patternOf(x.Args[0]), "Idempotency-Key"):
					randomKey(x, "the Idempotency-Key header", x.Args[1])
				case name == "Lock" && len(x.Args) == 0 && has("sync"):
					locks = append(locks, x)
				case (name == "HandleFunc" || name == "Handle") && len(x.Args) >= 2:
					if pat := patternOf(x.Args[0]); pat != "" {
						add(&res.Routes, x, KindRoute, pat)
					}
				case routeMethods[name] != "" && len(x.Args) >= 2 && (has("go-chi/chi") || has("gin-gonic/gin") || has("labstack/echo")):
					if pat := patternOf(x.Args[0]); strings.HasPrefix(pat, "/") {
						add(&res.Routes, x, KindRoute, routeMethods[name]+" "+pat)
					}
				case (name == "AddFunc" || name == "AddJob") && has("robfig/cron") && len(x.Args) == 2:
					add(&res.Crons, x, KindCron, "cron "+patternOf(x.Args[0]))
				case (name == "Charge" || name == "Refund" || name == "ChargeTx" || name == "RefundTx") && has("payonce/payonce/payments"):
					add(&res.Payments, x, KindPayment, "payonce payments.Client."+name+" (references derived from the key)")
					prov["payonce"] = true
				case recv == "paymentintent" || recv == "charge" || recv == "refund" || strings.HasPrefix(name, "V1PaymentIntents") || strings.Contains(exprString(sel.X), "V1PaymentIntents") || strings.Contains(exprString(sel.X), "V1Refunds"):
					if !has("stripe/stripe-go") || !(name == "New" || name == "Create" || name == "Confirm" || name == "Capture") {
						return true
					}
					add(&res.Payments, x, KindPayment, "stripe-go "+exprString(sel))
					if !fnSetsStripeKey(fd.Body) {
						add(&res.AntiPatterns, x, APNoKey, "stripe-go "+exprString(sel)+" without IdempotencyKey: a retry charges again")
					}
				case (name == "Subscribe" || name == "QueueSubscribe" || name == "PullSubscribe") && has("nats-io/nats.go"):
					add(&res.Consumers, x, KindConsumer, "NATS "+name)
				case (name == "ReadMessage" || name == "FetchMessage" || name == "Consume" || name == "Poll") && (has("kafka") || has("sarama")):
					add(&res.Consumers, x, KindConsumer, "Kafka "+name)
				case name == "Consume" && has("amqp"):
					add(&res.Consumers, x, KindConsumer, "AMQP Consume")
				case name == "SetNX" && len(x.Args) == 4 && isZero(x.Args[3]):
					add(&res.AntiPatterns, x, APLockNoTimeout, "SetNX with no expiration: a crashed holder keeps the lock forever")
				}
			case *ast.KeyValueExpr:
				if k, ok := x.Key.(*ast.Ident); ok && keyName.MatchString(k.Name) {
					if c := randomCall(x.Value); c != nil {
						add(&res.AntiPatterns, c, APRandomRef, k.Name+" from "+exprString(c.Fun)+": every retry gets a new value, so nothing is deduplicated")
					}
				}
			case *ast.AssignStmt:
				for i, l := range x.Lhs {
					if i >= len(x.Rhs) {
						continue
					}
					var name string
					switch l := l.(type) {
					case *ast.Ident:
						name = l.Name
					case *ast.SelectorExpr: // p.IdempotencyKey = ...
						name = l.Sel.Name
					default:
						continue
					}
					c := randomCall(x.Rhs[i])
					if c == nil {
						continue
					}
					named := keyName.MatchString(name)
					if id, ok := l.(*ast.Ident); ok {
						tainted[id.Name] = named
					}
					if named {
						add(&res.AntiPatterns, c, APRandomRef, exprString(l)+" from "+exprString(c.Fun)+": every retry gets a new value, so nothing is deduplicated")
					}
				}
			}
			return true
		})
		for i, s := range lits {
			u := strings.ToUpper(s)
			bl := litNodes[i]
			if strings.Contains(s, "adyen") && strings.Contains(s, "/payments") || strings.Contains(s, "paypal.com") || strings.Contains(s, "/v2/checkout/orders") {
				p := "Adyen"
				if strings.Contains(strings.ToLower(s), "paypal") || strings.Contains(s, "/v2/checkout") {
					p = "PayPal"
				}
				prov[strings.ToLower(p)] = true
				add(&res.Payments, bl, KindPayment, p+" REST "+s)
				if !fnHasKey {
					add(&res.AntiPatterns, bl, APNoKey, p+" call without Idempotency-Key / PayPal-Request-Id")
				}
			}
			if strings.Contains(u, "INSERT INTO") {
				for j, l := range locks {
					if l != nil && l.Pos() < bl.Pos() {
						add(&res.AntiPatterns, l, APLocalLock, "a process-local lock ("+exprString(l.Fun)+") around an INSERT: it orders one process only; another instance or a restart inserts again: claim the key in the store")
						locks[j] = nil
					}
				}
			}
			if handler && strings.Contains(u, "INSERT INTO") && !strings.Contains(u, "ON CONFLICT") {
				add(&res.AntiPatterns, bl, APInsertNoGuard, "an HTTP handler inserts without ON CONFLICT: a retried request inserts twice unless a unique constraint stops it")
			}
			if strings.Contains(u, "PG_ADVISORY_LOCK(") || (strings.Contains(u, "FOR UPDATE") && !strings.Contains(u, "NOWAIT") && !strings.Contains(u, "SKIP LOCKED")) {
				if !strings.Contains(strings.ToLower(body), "lock_timeout") {
					add(&res.AntiPatterns, bl, APLockNoTimeout, "a blocking lock with no lock_timeout: a stuck holder blocks every retry")
				}
			}
		}
	}
}

func recvName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	return exprString(t)
}

func isHandler(ft *ast.FuncType) bool {
	if ft.Params == nil {
		return false
	}
	for _, p := range ft.Params.List {
		s := exprString(p.Type)
		if s == "http.ResponseWriter" || s == "*gin.Context" || s == "echo.Context" {
			return true
		}
	}
	return false
}

func isZero(e ast.Expr) bool {
	bl, ok := e.(*ast.BasicLit)
	return ok && bl.Value == "0"
}

// randomCall finds uuid.New*, time.Now or rand.* within e.
func randomCall(e ast.Expr) *ast.CallExpr {
	var found *ast.CallExpr
	ast.Inspect(e, func(n ast.Node) bool {
		if found != nil {
			return false
		}
		if c, ok := n.(*ast.CallExpr); ok {
			s := exprString(c.Fun)
			if strings.HasPrefix(s, "uuid.New") || s == "time.Now" || strings.HasPrefix(s, "rand.") || s == "ulid.Make" {
				found = c
				return false
			}
		}
		return true
	})
	return found
}

// fnSetsStripeKey: the function sets an idempotency key on stripe params.
func fnSetsStripeKey(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if x.Sel.Name == "SetIdempotencyKey" || x.Sel.Name == "IdempotencyKey" {
				found = true
			}
		case *ast.KeyValueExpr:
			if k, ok := x.Key.(*ast.Ident); ok && k.Name == "IdempotencyKey" {
				found = true
			}
		}
		return !found
	})
	return found
}

// patternOf returns a route pattern from a literal, or a literal prefix
// followed by "…" for a concatenation.
func patternOf(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(x.Value)
		if err == nil {
			return s
		}
	case *ast.BinaryExpr:
		if l := patternOf(x.X); l != "" {
			return l + "{…}"
		}
	}
	return ""
}

func exprName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.CallExpr:
		return exprString(x.Fun) + "()"
	case *ast.IndexExpr:
		return exprString(x.X)
	}
	return "?"
}

// Apply completes answers with what the scan tells: the actions (mutating
// routes, consumers, cron jobs), the stack and the providers. It returns
// the questions (1..7) the scan answered.
func (r *ScanResult) Apply(a *Answers) map[int]bool {
	answered := map[int]bool{}
	if len(a.Actions) == 0 {
		seen := map[string]bool{}
		for _, rt := range r.Routes {
			method, path, _ := strings.Cut(rt.Detail, " ")
			if method == "GET" || method == "HEAD" || path == "" || seen[rt.Detail] {
				continue
			}
			seen[rt.Detail] = true
			act := Action{Name: actionName(method, path), Kind: "http", Trigger: rt.Detail, Location: rt.Pos}
			if strings.Contains(path, "webhook") {
				act.Kind, act.KeySource, act.IdentifyingFields = "webhook", "server", []string{"provider event id"}
			}
			a.Actions = append(a.Actions, act)
		}
		for _, c := range r.Consumers {
			a.Actions = append(a.Actions, Action{Name: actionName("consume", c.Detail), Kind: "consumer", Trigger: c.Detail, Location: c.Pos})
		}
		for _, c := range r.Crons {
			a.Actions = append(a.Actions, Action{Name: actionName("cron", c.Detail), Kind: "cron", Trigger: c.Detail, Location: c.Pos})
		}
	}
	for i, act := range a.Actions { // actions from answers: where the code has them
		for _, rt := range r.Routes {
			t, _, _ := strings.Cut(act.Trigger, "{")
			d, _, _ := strings.Cut(rt.Detail, "{")
			if act.Location == "" && t != "" && (rt.Detail == act.Trigger || strings.Contains(act.Trigger, "{") && t == d) {
				a.Actions[i].Location = rt.Pos
			}
		}
	}
	if len(a.Actions) > 0 {
		answered[1] = true
	}
	if !a.Stack.Known() && (len(r.Frameworks) > 0 || r.Database != "") {
		a.Stack.Language = "Go"
		fw := r.Frameworks
		if len(fw) > 1 {
			var o []string
			for _, f := range fw {
				if f != "net/http" {
					o = append(o, f)
				}
			}
			fw = o
		}
		a.Stack.Framework = strings.Join(fw, ", ")
		a.Stack.Database = r.Database
		a.Stack.Broker = strings.Join(r.Broker, ", ")
	}
	if a.Stack.Known() {
		answered[2] = true
	}
	if len(a.Providers) == 0 {
		for _, p := range r.Providers {
			if p != "payonce" {
				a.Providers = append(a.Providers, p)
			}
		}
	}
	if len(a.Providers) > 0 {
		answered[4] = true
	}
	return answered
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

func actionName(verb, path string) string {
	parts := nonWord.Split(path, -1)
	name := ""
	switch v := strings.ToLower(verb); v {
	case "", "post", "put":
	default:
		name = v
	}
	for _, p := range parts {
		switch p {
		case "", "POST", "PUT", "GET", "PATCH", "River", "worker", "Work", "NATS", "Kafka", "AMQP", "cron":
			continue
		}
		if name == "" {
			name = strings.ToLower(p[:1]) + p[1:]
			continue
		}
		name += strings.ToUpper(p[:1]) + p[1:]
	}
	if name == "" {
		name = "action"
	}
	if len(name) > 40 {
		name = name[:40]
	}
	return name
}

// Report prints a scan's findings.
func (r *ScanResult) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scan of %s: %d routes, %d payment calls, %d consumers, %d cron jobs, %d anti-patterns\n",
		r.Dir, len(r.Routes), len(r.Payments), len(r.Consumers), len(r.Crons), len(r.AntiPatterns))
	for _, l := range [][]Finding{r.Routes, r.Payments, r.Consumers, r.Crons, r.AntiPatterns} {
		for _, f := range l {
			fmt.Fprintf(&b, "  %s: %s: %s\n", f.Pos, f.Kind, f.Detail)
		}
	}
	return b.String()
}
