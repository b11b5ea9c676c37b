package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// resultCounts returns the latency histogram's sample count per result
// label (relayed, error, …) and the request counter per code class
// ("code=2xx", …).
func resultCounts(t *testing.T, h *harness) map[string]uint64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sentry_request_duration_seconds":
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "result" {
						out[lp.GetValue()] += m.GetHistogram().GetSampleCount()
					}
				}
			}
		case "sentry_requests_total": // code classes, as "code=4xx"
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "code" && m.GetCounter().GetValue() > 0 {
						out["code="+lp.GetValue()] += uint64(m.GetCounter().GetValue())
					}
				}
			}
		}
	}
	return out
}

// slowDownload is a raw backend answering a body of size bytes: the head
// and the first bytes at once, the rest when release is closed (or after
// 5 s).
func slowDownload(t *testing.T, size, first int) (*rawBackend, chan struct{}) {
	release := make(chan struct{})
	rb := startRawBackend(t, func(_ *rawBackend, _, _ int, _ *beReq, c net.Conn, _ *bufio.Reader) bool {
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("a", first)); err != nil {
			return false
		}
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		_, err := io.WriteString(c, strings.Repeat("b", size-first))
		return err == nil
	})
	return rb, release
}

// TestBackendFailsMidBody: a backend that closes its connection halfway
// through a chunked body whose head the client already has is counted,
// on every engine, with the status the client got (200), not as relayed.
func TestBackendFailsMidBody(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			const first = 20000
			rb := startRawBackend(t, func(_ *rawBackend, _, _ int, _ *beReq, c net.Conn, _ *bufio.Reader) bool {
				_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", first, strings.Repeat("a", first))
				return false // no last chunk
			})
			h := startEngine(t, e, []string{rb.addr}, Options{}, nil)
			c := dialProxy(t, h.addr)
			defer c.c.Close()
			_ = c.c.SetDeadline(time.Now().Add(5 * time.Second))
			c.write("GET /cut HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(resp.Body); err == nil || resp.StatusCode != 200 {
				t.Fatalf("%d, %d bytes, %v: want 200 and the body cut short", resp.StatusCode, len(b), err)
			}
			deadline := time.Now().Add(3 * time.Second)
			var res map[string]uint64
			for {
				res = resultCounts(t, h)
				if res["code=2xx"]+res["code=5xx"] == 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if res["code=2xx"] != 1 || res["code=5xx"] != 0 || res["relayed"] != 0 {
				t.Errorf("results %v, want one 200 not relayed", res)
			}
		})
	}
}

// TestAbandonedDownload: a client that reads the head and the first bytes
// of a large download and leaves is counted as gone on every engine (499,
// result "error" in the latency histogram): the exchange runs to the last
// byte read from the backend and sees the client go before it.
func TestAbandonedDownload(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			rb, release := slowDownload(t, 4<<20, 20000)
			h := startEngine(t, e, []string{rb.addr}, Options{}, nil)
			c := dialProxy(t, h.addr)
			c.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			c.c.Close() // the client leaves with the body in flight
			close(release)
			want, code := "error", "code=4xx" // 499
			deadline := time.Now().Add(5 * time.Second)
			var got map[string]uint64
			for {
				got = resultCounts(t, h)
				if got[want] == 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if got[want] != 1 || got["relayed"]+got["error"] != 1 || got[code] != 1 {
				t.Errorf("%s: results %v, want one %s", e, got, want)
			}
		})
	}
}
