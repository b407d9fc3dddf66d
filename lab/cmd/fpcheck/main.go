// Command fpcheck fails when code compares idempotency fingerprints in
// variable time. A fingerprint is compared in constant time
// ([idempotency.Fingerprint.Equal], crypto/subtle) before anything acts on a
// stored record; no functional test can tell a == from a constant-time
// compare, so make vet runs this check over every package and its tests:
//
//	go run ./lab/cmd/fpcheck ./...
//
// It reports, with file:line and the fix:
//
//   - ==, !=, <, <=, >, >= with a fingerprint on either side: an
//     idempotency.Fingerprint, an alias of it or a type defined from it
//     (type MyFP idempotency.Fingerprint); a conversion of one (string(fp),
//     []byte(fp), any(fp)) or a slice of one (fp[:8]); a variable or field
//     that holds one as a string, because a fingerprint value is assigned to
//     it (s := string(fp), T{f: string(fp)}) or it is converted to a
//     Fingerprint somewhere in the module (a column scanned into a string);
//     a struct or array value with a fingerprint in it;
//   - a switch on such a value;
//   - bytes.Equal, bytes.Compare, bytes.EqualFold, bytes.HasPrefix/HasSuffix,
//     their strings twins and reflect.DeepEqual given one;
//   - a generic function instantiated with a fingerprint for a type parameter
//     that allows == or < (slices.Contains, slices.Index, maps.Equal,
//     cmp.Compare): its body compares them;
//   - a Fingerprint.Equal that no longer calls crypto/subtle.ConstantTimeCompare.
//
// A comparison with the empty string (fp == "") is allowed: it tests
// presence and reveals nothing of the fingerprint. Map keys are allowed: a
// map compares keys only after their hashes match. Nothing else is exempt,
// not even Equal's own body. The checker's fixtures live in testdata, which
// ./... does not match.
//
// It type-checks each package of the main module, with its _test.go files,
// from source against its dependencies' export data from
// `go list -export -deps -test`, with the standard library only: it adds
// nothing to go.mod. It exits 1 on findings, 2 when a package cannot be
// loaded.
package main

import (
	"flag"
	"fmt"
	"go/token"
	"io"
	"os"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: fpcheck [packages]   (default ./...)")
		flag.PrintDefaults()
	}
	flag.Parse()
	os.Exit(run(flag.Args(), fpPkg, os.Stderr))
}

// run checks the packages matched by patterns and returns the exit code.
func run(patterns []string, target string, stderr io.Writer) int {
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	fset := token.NewFileSet()
	pkgs, loadErr := load(fset, ".", patterns)
	// What loaded is checked even when some package did not: its findings
	// are worth seeing while the build is being fixed.
	findings := check(fset, pkgs, target)
	for _, f := range findings {
		fmt.Fprintln(stderr, f)
	}
	if loadErr != nil {
		fmt.Fprintf(stderr, "fpcheck: %v\n", loadErr)
		return 2
	}
	if len(findings) > 0 {
		fmt.Fprintf(stderr, "fpcheck: %d fingerprint comparison(s) not in constant time\n", len(findings))
		return 1
	}
	return 0
}
