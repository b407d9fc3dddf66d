package design

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A Kit is the runnable code of one stack's deliverables: the middleware
// (or interceptor, filter, dependency) implementing claim, run, record,
// replay; the fingerprint utility with the platform's constant-time
// compare; the cleanup job; and the test suite covering the scenarios of
// section 11 in the stack's own test framework. Its files are shown in
// D3..D6 as they are, and [WriteKit] writes them to a folder where they
// compile and their tests run (the design package's own tests do both,
// against real servers, for every stack that has a kit).
type Kit struct {
	// Stack names the kit, e.g. "python-django" or "java-servlet".
	Stack string
	// Intro is a sentence shown before the middleware: what the code
	// plugs into and what it needs (drivers, versions).
	Intro string
	// Middleware, Fingerprint, Cleanup and Tests are the files of D3,
	// D4, D5 and D6.
	Middleware, Fingerprint, Cleanup, Tests []File
	// Support are files the others need (a schema, a build file,
	// package.json, conftest.py) shown in D6 after the tests.
	Support []File
	// Run is how to run the tests, shown in D6, e.g. "python3 -m pytest".
	Run string
}

// File is one file of a kit: its path relative to the kit's folder, the
// language of its code block, and its text.
type File struct {
	Path, Lang, Text string
}

// Files returns every file of the kit, in the order of the deliverables.
func (k *Kit) Files() []File {
	var fs []File
	for _, g := range [][]File{k.Middleware, k.Fingerprint, k.Cleanup, k.Tests, k.Support} {
		fs = append(fs, g...)
	}
	return fs
}

// kitMaker builds the kit of d's stack, or returns nil when the stack is
// not the maker's.
type kitMaker func(d *Document) *Kit

// kitMakers are tried in order; the first kit returned is the stack's.
// Each language's file registers its maker in an init function.
var kitMakers []kitMaker

// kitNames are the stacks the registered makers cover, for errors and
// docs ("python-django", ...).
var kitNames []string

func registerKit(names []string, m kitMaker) {
	kitMakers = append(kitMakers, m)
	kitNames = append(kitNames, names...)
}

// KitStacks names the stacks that have a runnable kit, or "none yet".
func KitStacks() []string {
	if len(kitNames) == 0 {
		return []string{"none yet"}
	}
	return append([]string(nil), kitNames...)
}

// KitOf returns the kit of d's stack, or nil when payonce has none (Go
// stacks use payonce's own API, shown in the deliverables; unknown stacks
// get the technology-agnostic design).
func KitOf(d *Document) *Kit {
	if d.Agnostic {
		return nil
	}
	for _, m := range kitMakers {
		if k := m(d); k != nil {
			return k
		}
	}
	return nil
}

// WriteKit writes k's files under dir, creating folders as needed; it
// refuses a path that leaves dir.
func WriteKit(k *Kit, dir string) error {
	seen := map[string]bool{}
	for _, f := range k.Files() {
		clean := filepath.Clean(filepath.FromSlash(f.Path))
		if filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || clean == ".." {
			return fmt.Errorf("design: kit %s: file path %q leaves the folder", k.Stack, f.Path)
		}
		if seen[clean] {
			return fmt.Errorf("design: kit %s: file %q twice", k.Stack, f.Path)
		}
		seen[clean] = true
		p := filepath.Join(dir, clean)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.Text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// kitBlocks renders files as a heading and a code block each.
func kitBlocks(files []File) []Block {
	var b []Block
	for _, f := range files {
		b = append(b, h3(f.Path), code(f.Lang, f.Text))
	}
	return b
}
