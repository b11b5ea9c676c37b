package main

import (
	"strings"
	"testing"

	"github.com/sentry-proxy/sentry/internal/deptest"
)

// TestNoTestFolderDependency pins that the binary does not depend on the
// end-to-end test folder: `sentry demo` uses sim/farm and sim/load.
func TestNoTestFolderDependency(t *testing.T) {
	const mod = "github.com/sentry-proxy/sentry/"
	deps := deptest.Deps(t, mod+"cmd/sentry")
	for pkg := range deps {
		if strings.HasPrefix(pkg, mod+"e2e/") || pkg == mod+"e2e" {
			t.Errorf("cmd/sentry depends on %s", pkg)
		}
	}
	// The demo's packages are in the list, so the check above looked at
	// the real graph.
	for _, want := range []string{mod + "sim/farm", mod + "sim/load"} {
		if !deps[want] {
			t.Errorf("go list -deps does not list %s", want)
		}
	}
}
