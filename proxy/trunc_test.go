package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// TestTruncatedChunkedResponse: a backend that closes its connection in
// the middle of a chunked body (no last chunk) must not have its answer
// presented to the client as complete; one that sends the last chunk and
// then closes, or keeps the connection for the next request, is relayed
// whole.
func TestTruncatedChunkedResponse(t *testing.T) {
	const chunk = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			rb := startRawBackend(t, func(_ *rawBackend, _, _ int, q *beReq, c net.Conn, _ *bufio.Reader) bool {
				switch q.target {
				case "/cut":
					_, _ = io.WriteString(c, chunk)
					return false
				case "/end-close":
					_, _ = io.WriteString(c, chunk+"0\r\n\r\n")
					return false
				}
				_, err := io.WriteString(c, chunk+"0\r\n\r\n")
				return err == nil
			})
			h := startEngine(t, e, []string{rb.addr}, Options{}, nil)
			get := func(path string) (int, string, error) {
				c := dialProxy(t, h.addr)
				c.write("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(c.br, nil)
				if err != nil {
					return 0, "", err
				}
				b, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), err
			}
			if code, b, err := get("/cut"); err == nil && code == 200 {
				t.Errorf("truncated chunked body relayed as complete: %q", b)
			}
			for _, p := range []string{"/end-close", "/keep", "/keep", "/keep"} {
				if code, b, err := get(p); err != nil || code != 200 || b != "hello" {
					t.Errorf("%s: %d %q %v, want 200 hello", p, code, b, err)
				}
			}
		})
	}
}
