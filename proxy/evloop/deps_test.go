package evloop

import (
	"testing"

	"github.com/sentry-proxy/sentry/internal/deptest"
)

// TestImportGraph pins the package's place (doc.go): package proxy starts
// the loops and fills in their Config, so the loop never imports proxy
// (that would be an import cycle, and the loop would reach past its
// interface into the fasthttp front end).
func TestImportGraph(t *testing.T) {
	const proxy = "github.com/sentry-proxy/sentry/proxy"
	deps := deptest.Deps(t, proxy+"/evloop")
	if deps[proxy] {
		t.Errorf("evloop imports %s", proxy)
	}
}
