package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"
)

const (
	fpPkg  = "github.com/payonce/payonce/idempotency"
	fpName = "Fingerprint"
	fix    = "use Fingerprint.Equal, constant time"
)

type finding struct {
	pos token.Position
	msg string
}

func (f finding) String() string {
	name := f.pos.Filename
	if wd, err := filepath.Abs("."); err == nil {
		if rel, err := filepath.Rel(wd, name); err == nil && !strings.HasPrefix(rel, "..") {
			name = rel
		}
	}
	return fmt.Sprintf("%s:%d:%d: %s", name, f.pos.Line, f.pos.Column, f.msg)
}

// checker holds what is known across all packages: the types that are
// fingerprints, and the variables and fields that hold one as a plain
// string or bytes.
type checker struct {
	fset    *token.FileSet
	target  string          // path of the package that declares Fingerprint
	fpTypes map[string]bool // objKey of idempotency.Fingerprint and the types defined from it
	fpVars  map[string]bool // objKey of variables and fields that hold a fingerprint
}

// check reports every comparison of a fingerprint that is not constant time
// in pkgs, and a Fingerprint.Equal that no longer uses crypto/subtle. The
// fingerprint type is target.Fingerprint (fpPkg but in the tests).
func check(fset *token.FileSet, pkgs []*checked, target string) []finding {
	c := &checker{fset: fset, target: target, fpTypes: map[string]bool{target + "." + fpName: true}, fpVars: map[string]bool{}}
	// What holds a fingerprint is learnt across packages (a field set in
	// one package is compared in another), to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, p := range pkgs {
			if c.learn(p) {
				changed = true
			}
		}
	}
	var out []finding
	for _, p := range pkgs {
		out = append(out, c.report(p)...)
	}
	sortFindings(out)
	return dedupe(out)
}

// objKey names an object the same way whether it was type-checked from
// source or read from export data: its package, name and, for a field or
// local, the file and line of its declaration (export data keeps no
// column).
func (c *checker) objKey(obj types.Object) string {
	if obj.Pkg() == nil {
		return obj.Name()
	}
	if obj.Parent() == obj.Pkg().Scope() {
		return obj.Pkg().Path() + "." + obj.Name()
	}
	pos := c.fset.Position(obj.Pos())
	return fmt.Sprintf("%s.%s@%s:%d", obj.Pkg().Path(), obj.Name(), filepath.Base(pos.Filename), pos.Line)
}

// isFP reports whether t is idempotency.Fingerprint, an alias of it, or a
// type defined from it (type MyFP idempotency.Fingerprint).
func (c *checker) isFP(t types.Type) bool {
	if t == nil {
		return false
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && c.fpTypes[c.objKey(n.Obj())]
}

// holdsFP reports whether t is a fingerprint or, compared with ==, compares
// one: a struct with such a field, an array of such elements.
func (c *checker) holdsFP(t types.Type) bool {
	return c.holds(t, map[types.Type]bool{})
}

func (c *checker) holds(t types.Type, seen map[types.Type]bool) bool {
	if t == nil || seen[t] {
		return false
	}
	seen[t] = true
	if c.isFP(t) {
		return true
	}
	switch u := t.Underlying().(type) {
	case *types.Struct:
		for i := range u.NumFields() {
			if c.holds(u.Field(i).Type(), seen) {
				return true
			}
		}
	case *types.Array:
		return c.holds(u.Elem(), seen)
	}
	return false
}

// fpContainer reports whether t is a fingerprint or a pointer, slice, array
// or map of them, which reflect.DeepEqual compares with ==. A struct that
// has a fingerprint among other fields is not: comparing whole records is
// a test's assertion of state, not a fingerprint check.
func (c *checker) fpContainer(t types.Type) bool {
	for range 8 {
		if t == nil {
			return false
		}
		if c.isFP(t) {
			return true
		}
		switch u := t.Underlying().(type) {
		case *types.Pointer:
			t = u.Elem()
		case *types.Slice:
			t = u.Elem()
		case *types.Array:
			t = u.Elem()
		case *types.Map:
			t = u.Elem() // keys are looked up by hash

		default:
			return false
		}
	}
	return false
}

// fpValue reports whether e evaluates to a fingerprint, in its own type or
// converted (string(fp), []byte(fp), any(fp)), sliced (fp[:8]), or held by
// a variable or field known to hold one.
func (c *checker) fpValue(info *types.Info, e ast.Expr) bool {
	e = ast.Unparen(e)
	if c.isFP(info.TypeOf(e)) {
		return true
	}
	switch e := e.(type) {
	case *ast.CallExpr:
		if len(e.Args) == 1 && isConversion(info, e) {
			return c.fpValue(info, e.Args[0])
		}
	case *ast.SliceExpr:
		return c.fpValue(info, e.X)
	case *ast.StarExpr:
		return c.fpValue(info, e.X)
	case *ast.Ident, *ast.SelectorExpr:
		if v := varOf(info, e); v != nil {
			return c.fpVars[c.objKey(v)]
		}
	}
	return false
}

func isConversion(info *types.Info, call *ast.CallExpr) bool {
	tv, ok := info.Types[call.Fun]
	return ok && tv.IsType()
}

// varOf returns the variable or field e names, if any.
func varOf(info *types.Info, e ast.Expr) *types.Var {
	var id *ast.Ident
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = e
	case *ast.SelectorExpr:
		id = e.Sel
	default:
		return nil
	}
	obj := info.Uses[id]
	if obj == nil {
		obj = info.Defs[id]
	}
	v, _ := obj.(*types.Var)
	return v
}

// learn records, for one package, the types defined from a fingerprint and
// the variables and fields that hold one: assigned a fingerprint value, or
// converted to a Fingerprint somewhere (a column scanned into a string).
// It reports whether it learnt anything new.
func (c *checker) learn(p *checked) bool {
	changed := false
	markVar := func(e ast.Expr) {
		v := varOf(p.info, e)
		if v == nil || c.isFP(v.Type()) {
			return
		}
		if k := c.objKey(v); !c.fpVars[k] {
			c.fpVars[k] = true
			changed = true
		}
	}
	for _, f := range p.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if n.Assign.IsValid() {
					return true // an alias is the same type
				}
				obj := p.info.Defs[n.Name]
				if obj != nil && c.isFP(p.info.TypeOf(n.Type)) {
					if k := c.objKey(obj); !c.fpTypes[k] {
						c.fpTypes[k] = true
						changed = true
					}
				}
			case *ast.AssignStmt:
				if len(n.Lhs) == len(n.Rhs) {
					for i, rhs := range n.Rhs {
						if c.fpValue(p.info, rhs) {
							markVar(n.Lhs[i])
						}
					}
				}
			case *ast.ValueSpec:
				if len(n.Names) == len(n.Values) {
					for i, v := range n.Values {
						if c.fpValue(p.info, v) {
							markVar(n.Names[i])
						}
					}
				}
			case *ast.KeyValueExpr:
				// T{field: string(fp)}: only struct literal keys name a var.
				if id, ok := n.Key.(*ast.Ident); ok && c.fpValue(p.info, n.Value) {
					if v, ok := p.info.Uses[id].(*types.Var); ok && v.IsField() {
						markVar(id)
					}
				}
			case *ast.CallExpr:
				if len(n.Args) == 1 && isConversion(p.info, n) && c.isFP(p.info.TypeOf(n.Fun)) {
					markVar(n.Args[0])
				}
			}
			return true
		})
	}
	return changed
}

// comparing lists the functions that compare their arguments in variable
// time: they return at the first byte that differs.
var comparing = map[string]bool{
	"bytes.Equal":       true,
	"bytes.EqualFold":   true,
	"bytes.Compare":     true,
	"bytes.HasPrefix":   true,
	"bytes.HasSuffix":   true,
	"strings.Compare":   true,
	"strings.EqualFold": true,
	"strings.HasPrefix": true,
	"strings.HasSuffix": true,
	"reflect.DeepEqual": true,
}

// report returns the package's comparisons of fingerprints that are not
// constant time.
func (c *checker) report(p *checked) []finding {
	var out []finding
	add := func(pos token.Pos, format string, args ...any) {
		out = append(out, finding{c.fset.Position(pos), fmt.Sprintf(format, args...) + "; " + fix})
	}
	for _, f := range p.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if c.isFPEqual(p, n) && !callsConstantTimeCompare(p.info, n.Body) {
					out = append(out, finding{c.fset.Position(n.Pos()),
						"Fingerprint.Equal does not call crypto/subtle.ConstantTimeCompare; compare the bytes with it, constant time"})
				}
			case *ast.BinaryExpr:
				switch n.Op {
				case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
				default:
					return true
				}
				if what := c.compared(p.info, n.X, n.Y, n.Op); what != "" {
					add(n.OpPos, "%s on %s is not constant time", n.Op, what)
				}
			case *ast.SwitchStmt:
				if n.Tag == nil {
					return true
				}
				for _, cl := range n.Body.List {
					for _, e := range cl.(*ast.CaseClause).List {
						if what := c.compared(p.info, n.Tag, e, token.EQL); what != "" {
							add(e.Pos(), "switch case compares %s with ==, not in constant time", what)
						}
					}
				}
			case *ast.CallExpr:
				name := calleeName(p.info, n)
				if comparing[name] {
					for _, a := range n.Args {
						if c.fpValue(p.info, a) || name == "reflect.DeepEqual" && c.fpContainer(p.info.TypeOf(a)) {
							add(n.Lparen, "%s on %s is not constant time", name, c.describe(p.info, a))
							break
						}
					}
				}
			case *ast.Ident:
				if inst, ok := p.info.Instances[n]; ok {
					if what := c.comparableInstance(p.info, n, inst); what != "" {
						add(n.Pos(), "%s", what)
					}
				}
			}
			return true
		})
	}
	return out
}

// compared returns what x op y compares that holds a fingerprint, or "" when
// nothing does, or when one side is the empty string: a presence test
// reveals nothing of the fingerprint.
func (c *checker) compared(info *types.Info, x, y ast.Expr, op token.Token) string {
	if op == token.EQL || op == token.NEQ {
		if isEmptyString(info, x) || isEmptyString(info, y) {
			return ""
		}
	}
	for _, e := range []ast.Expr{x, y} {
		if c.fpValue(info, e) || c.holdsFP(info.TypeOf(e)) {
			return c.describe(info, e)
		}
	}
	return ""
}

func (c *checker) describe(info *types.Info, e ast.Expr) string {
	t := info.TypeOf(e)
	switch {
	case c.isFP(t):
		return types.TypeString(types.Unalias(t), shortQualifier) + " values"
	case c.fpValue(info, e):
		return "a fingerprint held as " + types.TypeString(t, shortQualifier)
	default:
		return types.TypeString(t, shortQualifier) + " (it holds idempotency.Fingerprint values)"
	}
}

func shortQualifier(p *types.Package) string { return p.Name() }

func isEmptyString(info *types.Info, e ast.Expr) bool {
	tv, ok := info.Types[e]
	return ok && tv.Value != nil && tv.Value.Kind() == constant.String && constant.StringVal(tv.Value) == ""
}

// calleeName returns "pkg.Func" or "pkg.Type.Method" for a call of a
// package-level function or a method, "" otherwise.
func calleeName(info *types.Info, call *ast.CallExpr) string {
	var id *ast.Ident
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fn
	case *ast.SelectorExpr:
		id = fn.Sel
	case *ast.IndexExpr:
		if sel, ok := fn.X.(*ast.SelectorExpr); ok {
			id = sel.Sel
		} else if i, ok := fn.X.(*ast.Ident); ok {
			id = i
		}
	}
	if id == nil {
		return ""
	}
	f, ok := info.Uses[id].(*types.Func)
	if !ok || f.Pkg() == nil {
		return ""
	}
	if recv := f.Signature().Recv(); recv != nil {
		t := recv.Type()
		if ptr, ok := t.(*types.Pointer); ok {
			t = ptr.Elem()
		}
		if n, ok := types.Unalias(t).(*types.Named); ok {
			return f.Pkg().Path() + "." + n.Obj().Name() + "." + f.Name()
		}
		return ""
	}
	return f.Pkg().Path() + "." + f.Name()
}

// comparableInstance reports a generic function instantiated with a
// fingerprint for a type parameter whose constraint allows == or <
// (slices.Contains, slices.Index, maps.Equal, cmp.Compare, ...): its body
// may compare them. A parameter that only keys a map (maps.Keys's K) is
// left alone: a map compares keys after hashing.
func (c *checker) comparableInstance(info *types.Info, id *ast.Ident, inst types.Instance) string {
	fn, ok := info.Uses[id].(*types.Func)
	if !ok {
		return ""
	}
	sig := fn.Origin().Signature()
	tps := sig.TypeParams()
	if tps == nil || tps.Len() != inst.TypeArgs.Len() {
		return ""
	}
	keyOnly := mapKeyParams(tps)
	for i := range tps.Len() {
		tp := tps.At(i)
		iface, _ := tp.Constraint().Underlying().(*types.Interface)
		if iface == nil || !iface.IsComparable() || keyOnly[tp] {
			continue
		}
		if arg := inst.TypeArgs.At(i); c.holdsFP(arg) {
			name := fn.Name()
			if fn.Pkg() != nil {
				name = fn.Pkg().Name() + "." + name
			}
			return fmt.Sprintf("%s instantiated with %s for %s %s compares with ==, not in constant time",
				name, types.TypeString(types.Unalias(arg), shortQualifier), tp.Obj().Name(), types.TypeString(tp.Constraint(), shortQualifier))
		}
	}
	return ""
}

// mapKeyParams returns the type parameters that appear as the key of a
// map in another type parameter's constraint (Map ~map[K]V).
func mapKeyParams(tps *types.TypeParamList) map[*types.TypeParam]bool {
	out := map[*types.TypeParam]bool{}
	for i := range tps.Len() {
		iface, _ := tps.At(i).Constraint().Underlying().(*types.Interface)
		if iface == nil {
			continue
		}
		for j := range iface.NumEmbeddeds() {
			var terms []*types.Term
			switch e := iface.EmbeddedType(j).(type) {
			case *types.Union:
				for k := range e.Len() {
					terms = append(terms, e.Term(k))
				}
			default:
				terms = append(terms, types.NewTerm(false, e))
			}
			for _, t := range terms {
				if m, ok := t.Type().Underlying().(*types.Map); ok {
					if k, ok := m.Key().(*types.TypeParam); ok {
						out[k] = true
					}
				}
			}
		}
	}
	return out
}

// isFPEqual reports whether fd declares idempotency.Fingerprint's Equal.
func (c *checker) isFPEqual(p *checked, fd *ast.FuncDecl) bool {
	if fd.Recv == nil || fd.Name.Name != "Equal" || p.pkg.Path() != c.target || fd.Body == nil {
		return false
	}
	fn, ok := p.info.Defs[fd.Name].(*types.Func)
	if !ok {
		return false
	}
	t := fn.Signature().Recv().Type()
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Name() == fpName
}

func callsConstantTimeCompare(info *types.Info, body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && calleeName(info, call) == "crypto/subtle.ConstantTimeCompare" {
			found = true
		}
		return !found
	})
	return found
}

// dedupe drops repeated findings (a file type-checked in two packages).
func dedupe(fs []finding) []finding {
	var out []finding
	seen := map[string]bool{}
	for _, f := range fs {
		k := f.pos.String() + f.msg
		if !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out
}
