package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTestFolderDependency pins that the binary does not depend on the
// end-to-end test folder: `sentry demo` uses sim/farm and sim/load.
func TestNoTestFolderDependency(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const mod = "github.com/sentry-proxy/sentry/"
	seen := map[string]bool{}
	for _, pkg := range strings.Fields(string(out)) {
		seen[pkg] = true
		if strings.HasPrefix(pkg, mod+"e2e/") || pkg == mod+"e2e" {
			t.Errorf("cmd/sentry depends on %s", pkg)
		}
	}
	// The demo's packages are in the list, so the check above looked at
	// the real graph.
	for _, want := range []string{mod + "sim/farm", mod + "sim/load", mod + "cmd/sentry"} {
		if !seen[want] {
			t.Errorf("go list -deps does not list %s; output:\n%s", want, out)
		}
	}
}
