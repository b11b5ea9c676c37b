package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sentry-proxy/sentry/policy"
)

// BenchmarkRelayForwarded is BenchmarkRelay from a trusted proxy that
// sends two X-Forwarded-For lines, X-Forwarded-Proto and a request ID:
// the header policy's trusted path must stay allocation-free too.
func BenchmarkRelayForwarded(b *testing.B) {
	be := fastBackend(b)
	h := startProxy(&testing.T{}, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TrustedProxies = append(a.TrustedProxies, mustPrefix("127.0.0.0/8"))
	})
	defer func() { b.StopTimer(); h.close() }()
	c := benchClient(h.addr)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + h.addr + "/x")
		req.Header.Add("X-Forwarded-For", "203.0.113.9")
		req.Header.Add("X-Forwarded-For", "10.0.0.1")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Request-Id", "abc123")
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Errorf("relay: %v %d", err, resp.StatusCode())
				return
			}
		}
	})
}
