// Package deptest lets a package's tests pin its import graph: Deps lists
// every package the package in the current directory depends on, itself
// included, as `go list -deps .` reports them.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

// Deps returns the import paths the package in the test's working
// directory depends on, itself included. It skips the test when the go
// tool is not on PATH and fails it when go list fails or does not list the
// package itself (self, its import path), so a check built on it always
// looks at the real graph.
func Deps(t *testing.T, self string) map[string]bool {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		deps[pkg] = true
	}
	if !deps[self] {
		t.Fatalf("go list -deps did not list %s itself; output:\n%s", self, out)
	}
	return deps
}

// Imports returns the import paths the package in the test's working
// directory imports itself (its non-test files), as `go list -f
// '{{.Imports}}' .` reports them: the direct edges of the graph Deps
// walks. It skips and fails as Deps does.
func Imports(t *testing.T) map[string]bool {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-f", "{{range .Imports}}{{.}}\n{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -f .Imports: %v\n%s", err, out)
	}
	imports := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		imports[pkg] = true
	}
	return imports
}
