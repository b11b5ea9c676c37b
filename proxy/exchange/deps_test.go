package exchange

import (
	"strings"
	"testing"

	"github.com/sentry-proxy/sentry/internal/deptest"
)

// TestImportGraph pins the core's place (doc.go): the drivers import it,
// so it reaches none of them, nor what a driver speaks to the world with
// -- fasthttp, x/net (the h2 codec's HPACK), the h2 codec itself -- and it
// makes no system call of its own (no x/sys/unix among its imports; the
// metrics library below pipeline reads /proc through it, which is not the
// request path's business).
func TestImportGraph(t *testing.T) {
	const proxy = "github.com/sentry-proxy/sentry/proxy"
	for pkg := range deptest.Deps(t, proxy+"/exchange") {
		switch {
		case pkg == proxy, pkg == proxy+"/evloop", pkg == proxy+"/h2srv":
			t.Errorf("exchange imports %s: the drivers import the core, not the other way", pkg)
		case strings.HasPrefix(pkg, "github.com/valyala/fasthttp"), strings.HasPrefix(pkg, "golang.org/x/net"):
			t.Errorf("exchange imports %s: protocols are the drivers'", pkg)
		}
	}
	if deptest.Imports(t)["golang.org/x/sys/unix"] {
		t.Error("exchange imports golang.org/x/sys/unix: the core makes no system call")
	}
}
