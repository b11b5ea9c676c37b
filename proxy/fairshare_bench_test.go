package proxy

import (
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/policy"
)

// fairPolicy: one app on the real admission stack (batch mode), fair
// sharing on or off.
const fairPolicy = `
apps:
  - name: web
    listen: %s
    backends: {static: [%s]}
    admission: {mode: batch, fair_share: {enabled: %v}}
    classes: [{name: web, default: true}]
`

// startFair starts the proxy with fairPolicy and the real control stack.
func startFair(b *testing.B, backend string, on bool) *harness {
	addr := freeAddr(b)
	snap, err := policy.Parse("<bench>", []byte(fmt.Sprintf(fairPolicy, addr, backend, on)))
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	m, err := control.NewManager(control.Options{Logger: log, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	return startProxySnap(b, addr, snap, Options{Control: controlBuilder{m}, Registerer: reg, Logger: log})
}

// BenchmarkFairReject is the reject path in memory (BenchmarkServeInMemory)
// on the real admission stack, fair sharing on and off: the difference is
// fair share's per-request cost (the client key, the table's lookup and
// standing, the decision counted), which must allocate nothing.
func BenchmarkFairReject(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("fair=%v", on), func(b *testing.B) {
			h := startFair(b, "127.0.0.1:1", on)
			serveInMemory(b, h, "GET /search?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
		})
	}
}

// BenchmarkFairRelay is BenchmarkRelay on the real admission stack, fair
// sharing on and off: allocs/op must stay 0 (ns/op is loopback's).
func BenchmarkFairRelay(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("fair=%v", on), func(b *testing.B) {
			be := fastBackend(b)
			h := startFair(b, be, on)
			defer func() { b.StopTimer(); h.close() }()
			c := benchClient(h.addr)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := newBenchReq(h.addr)
				for pb.Next() {
					if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Errorf("relay: %v %d", err, resp.StatusCode())
						return
					}
				}
			})
		})
	}
}

func newBenchReq(addr string) (*fasthttp.Request, *fasthttp.Response) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("http://" + addr + "/x")
	return req, resp
}
