package control

import (
	"strings"
	"testing"

	"github.com/sentry-proxy/sentry/internal/deptest"
)

// TestNoProxyDependency pins the seam between the admission stack and the
// request path: control must not depend on proxy, directly or through
// another package (the adapter lives in cmd/sentry).
func TestNoProxyDependency(t *testing.T) {
	const forbidden = "github.com/sentry-proxy/sentry/proxy"
	for pkg := range deptest.Deps(t, "github.com/sentry-proxy/sentry/control") {
		if pkg == forbidden || strings.HasPrefix(pkg, forbidden+"/") {
			t.Errorf("control depends on %s", pkg)
		}
	}
}
