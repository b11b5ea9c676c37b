package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestChunkedTrailerBareLF: a backend's chunked response whose trailer
// line ends in a bare LF is malformed (RFC 9112 §7.1.2: lines end in
// CRLF); a parser that took the LF for a line's end reads the rest of
// the connection differently from one that does not. The loops, which
// pass the backend's bytes on as they are, refuse it: 502 when nothing
// of the answer went to the client yet, and the backend connection is
// closed (the next request goes on a new one).
// knownDifferences["trailer-bare-lf"]: fasthttp reads it leniently and
// writes its own chunked framing and trailers, so the client gets a
// well-formed answer, and keeps the connection.
func TestChunkedTrailerBareLF(t *testing.T) {
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) {
			rb := startRawBackend(t, func(_ *rawBackend, _, _ int, q *beReq, c net.Conn, _ *bufio.Reader) bool {
				if q.target == "/bad" {
					_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\n\r\n")
					return err == nil
				}
				_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return err == nil
			})
			h := startProxyOpts(t, []string{rb.addr}, Options{Engine: e}, nil)
			c := dialProxy(t, h.addr)
			c.write("GET /bad HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, berr := io.ReadAll(resp.Body)
			if e == EngineFastHTTP {
				if resp.StatusCode != 200 || berr != nil || string(b) != "hello" {
					t.Errorf("fasthttp: %d %q %v: drop knownDifferences[\"trailer-bare-lf\"] if it refuses the trailer now", resp.StatusCode, b, berr)
				}
				return
			}
			if resp.StatusCode != 502 {
				t.Fatalf("status %d (body %q, %v), want 502", resp.StatusCode, b, berr)
			}
			if n := rb.accepted.Load(); n != 1 {
				t.Fatalf("backend connections %d, want 1", n)
			}
			resp2, body := c.do("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp2.StatusCode != 200 || body != "ok" {
				t.Fatalf("next request: %d %q", resp2.StatusCode, body)
			}
			if n := rb.accepted.Load(); n != 2 {
				t.Errorf("the next request went on backend connection %d: the one that sent the malformed trailer was reused", n)
			}
		})
	}
}
