package control

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoProxyDependency pins the seam between the admission stack and the
// request path: control must not depend on proxy, directly or through
// another package (the adapter lives in cmd/sentry).
func TestNoProxyDependency(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const self = "github.com/sentry-proxy/sentry/control"
	const forbidden = "github.com/sentry-proxy/sentry/proxy"
	var sawSelf bool
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == self {
			sawSelf = true
		}
		if pkg == forbidden || strings.HasPrefix(pkg, forbidden+"/") {
			t.Errorf("control depends on %s", pkg)
		}
	}
	if !sawSelf {
		t.Fatalf("go list -deps did not list %s itself; output:\n%s", self, out)
	}
}
