package pipeline

import (
	"strings"
	"testing"

	"github.com/sentry-proxy/sentry/internal/deptest"
)

// TestImportGraph pins the package's place (doc.go): both engines import
// it, so it imports neither of them, nor fasthttp.
func TestImportGraph(t *testing.T) {
	const proxy = "github.com/sentry-proxy/sentry/proxy"
	for pkg := range deptest.Deps(t, proxy+"/pipeline") {
		switch {
		case pkg == proxy, pkg == proxy+"/evloop":
			t.Errorf("pipeline imports %s: the engines import the pipeline, not the other way", pkg)
		case strings.HasPrefix(pkg, "github.com/valyala/fasthttp"):
			t.Errorf("pipeline imports %s: fasthttp's types stay in package proxy (proxy/fasthttp_adapt.go)", pkg)
		}
	}
}
