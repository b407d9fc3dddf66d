package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// listed is the part of `go list -json` the loader reads.
type listed struct {
	ImportPath string
	Name       string
	Dir        string
	Export     string
	ForTest    string
	DepOnly    bool
	GoFiles    []string
	CgoFiles   []string
	ImportMap  map[string]string
	Module     *struct{ Main bool }
	Error      *struct{ Err string }
}

// checked is one package type-checked from source.
type checked struct {
	id    string // go list's ImportPath: "p", "p [p.test]" or "p_test [p.test]"
	pkg   *types.Package
	files []*ast.File
	info  *types.Info
}

// load lists the packages matched by patterns (run in dir) with their tests,
// and type-checks from source each package of the main module and each of
// its test packages, against the export data of their dependencies. The
// export data comes from the build cache, so a warm run takes seconds and
// nothing is added to go.mod.
func load(fset *token.FileSet, dir string, patterns []string) ([]*checked, error) {
	args := append([]string{"list", "-e", "-export", "-deps", "-test",
		"-json=ImportPath,Name,Dir,Export,ForTest,DepOnly,GoFiles,CgoFiles,ImportMap,Module,Error", "--"}, patterns...)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	byID := map[string]*listed{}
	var order []*listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listed)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		byID[p.ImportPath] = p
		order = append(order, p)
	}

	// The packages to check: every root of the main module, replaced by
	// its test variant (its own files plus its _test.go files) when it has
	// one, and its external test package.
	var targets []*listed
	for _, p := range order {
		if p.DepOnly || p.ForTest != "" || strings.HasSuffix(p.ImportPath, ".test") ||
			p.Module == nil || !p.Module.Main {
			continue
		}
		if t, ok := byID[p.ImportPath+" ["+p.ImportPath+".test]"]; ok {
			targets = append(targets, t)
		} else {
			targets = append(targets, p)
		}
		if x, ok := byID[p.ImportPath+"_test ["+p.ImportPath+".test]"]; ok {
			targets = append(targets, x)
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no packages of the main module match %s", strings.Join(patterns, " "))
	}

	var res []*checked
	var errs []error
	importers := map[string]types.Importer{}
	for _, p := range targets {
		c, err := typeCheck(fset, p, byID, importers)
		if err != nil {
			errs = append(errs, err)
		}
		if c != nil {
			res = append(res, c)
		}
	}
	return res, errors.Join(errs...)
}

// typeCheck parses and type-checks p. Packages that resolve their imports
// alike share an importer, which decodes each export file once; a test
// variant maps some imports to other test variants ("q" -> "q [p.test]"),
// so it gets its own.
func typeCheck(fset *token.FileSet, p *listed, byID map[string]*listed, importers map[string]types.Importer) (*checked, error) {
	if p.Error != nil {
		return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
	}
	if len(p.CgoFiles) > 0 {
		return nil, fmt.Errorf("%s: cgo files are not supported by fpcheck", p.ImportPath)
	}
	var files []*ast.File
	for _, name := range p.GoFiles {
		if !filepath.IsAbs(name) {
			name = filepath.Join(p.Dir, name)
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	var remapped []string
	for from, to := range p.ImportMap {
		if from != to {
			remapped = append(remapped, from+"="+to)
		}
	}
	sort.Strings(remapped)
	imp := importers[strings.Join(remapped, ",")]
	if imp == nil {
		importMap := p.ImportMap
		lookup := func(path string) (io.ReadCloser, error) {
			id := path
			if m, ok := importMap[path]; ok {
				id = m
			}
			dep, ok := byID[id]
			if !ok || dep.Export == "" {
				return nil, fmt.Errorf("no export data for %s", id)
			}
			return os.Open(dep.Export)
		}
		imp = importer.ForCompiler(fset, "gc", lookup)
		importers[strings.Join(remapped, ",")] = imp
	}
	var errs []error
	conf := types.Config{
		Importer: imp,
		Sizes:    types.SizesFor("gc", "amd64"),
		// Go on after an error, so that the rest of the package is
		// still checked; the errors are reported all the same.
		Error: func(err error) {
			if len(errs) < 10 {
				errs = append(errs, err)
			}
		},
	}
	info := &types.Info{
		Types:     map[ast.Expr]types.TypeAndValue{},
		Defs:      map[*ast.Ident]types.Object{},
		Uses:      map[*ast.Ident]types.Object{},
		Instances: map[*ast.Ident]types.Instance{},
	}
	path, _, _ := strings.Cut(p.ImportPath, " ")
	pkg, _ := conf.Check(path, fset, files, info)
	c := &checked{id: p.ImportPath, pkg: pkg, files: files, info: info}
	if len(errs) > 0 {
		return c, fmt.Errorf("type-checking %s: %w", p.ImportPath, errors.Join(errs...))
	}
	return c, nil
}

// goTool is the go command that runs this one: $GOROOT/bin/go when go run
// set GOROOT, else the go on $PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if _, err := os.Stat(filepath.Join(root, "bin", "go")); err == nil {
			return filepath.Join(root, "bin", "go")
		}
	}
	return "go"
}

// sortFindings orders findings by file, line and column.
func sortFindings(fs []finding) {
	sort.Slice(fs, func(i, j int) bool {
		a, b := fs[i].pos, fs[j].pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}
