package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy"
)

// inproc is sentry's proxy and admission stack in the test process, for
// tests that need to look inside (estimates, registries).
type inproc struct {
	addr string
	p    *proxy.Proxy
	m    *control.Manager
	reg  *prometheus.Registry
}

// startInproc parses policyYAML (with %s placeholders already filled) and
// serves its first listener.
func startInproc(t *testing.T, policyYAML string) *inproc {
	t.Helper()
	snap, err := policy.Parse("<test>", []byte(policyYAML))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	reg := prometheus.NewRegistry()
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	m, err := control.NewManager(control.Options{Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Logger: log, Registerer: reg, Control: controlBuilder{m}}, snap)
	if err != nil {
		t.Fatal(err)
	}
	addr := snap.Listeners[0].Addr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(addr, ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := contextTimeout(3 * time.Second)
		defer cancel()
		p.ShutdownAll(ctx)
		p.Close()
	})
	return &inproc{addr: addr, p: p, m: m, reg: reg}
}

// hammer runs workers looping GETs over paths (round robin) for d, with
// per-request headers from hdr; seen, when not nil, sees each response
// before its body is read. It returns per-status counts.
func hammer(t *testing.T, base string, workers int, d time.Duration, paths []string, hdr map[string]string, seen func(path string, resp *http.Response)) map[int]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[int]int{}
	stop := time.Now().Add(d)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; time.Now().Before(stop) && i < 1_000_000; i++ {
				req, _ := http.NewRequest("GET", base+paths[i%len(paths)], nil)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				code := 0
				if err == nil {
					if seen != nil {
						seen(paths[i%len(paths)], resp)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				counts[code]++
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	return counts
}

func policyFor(listen string, backends []string, extra string) string {
	return fmt.Sprintf(`
admin: {listen: "off"}
apps:
  - name: shop
    listen: %s
    backends: {static: [%s]}
%s`, listen, strings.Join(backends, ", "), extra)
}

// controlBuilder adapts a control.Manager to proxy.ControlBuilder, as
// cmd/sentry/wire.go does for the binary (control does not import proxy).
type controlBuilder struct{ *control.Manager }

func (b controlBuilder) Build(ac *policy.App, pool *lb.Pool) (proxy.Controller, error) {
	app, err := b.Manager.Build(ac, pool)
	if err != nil {
		return nil, err
	}
	return app, nil
}
