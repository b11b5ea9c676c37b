package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sentry-proxy/sentry/internal/freeport"
	"github.com/sentry-proxy/sentry/policy"
)

// coreBackend is a raw HTTP/1.1 backend that records each request's head
// as it came on the wire, and the connection it came on, and answers with
// resp.
type coreBackend struct {
	addr string
	mu   sync.Mutex
	reqs []string
	conn []int
}

func startCoreBackend(t *testing.T, resp string) *coreBackend {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &coreBackend{addr: addr}
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn, n int) {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						head.WriteString(line)
						if line == "\r\n" {
							break
						}
					}
					b.mu.Lock()
					b.reqs, b.conn = append(b.reqs, head.String()), append(b.conn, n)
					b.mu.Unlock()
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
				}
			}(c, n)
		}
	}()
	return b
}

// TestH2WorkerStreamsOnTheCore: an h2 stream the h2 workers run (h2c
// here, on both engines) that ended with its head, for an app with plain
// HTTP/1.1 backends, is served by the exchange core's goroutine driver
// (gdrive.go): the backend gets the core's request (Host from
// :authority, no Content-Length for a body-less request, the forwarding
// fields), a chunked response reaches the client decoded, with the
// core's response policy (hop-by-hop fields dropped, the request ID
// added), and the backend connection is kept for the next stream.
func TestH2WorkerStreamsOnTheCore(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			be := startCoreBackend(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-B: 1\r\nKeep-Alive: timeout=5\r\n\r\n"+
				"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
			h := startEngine(t, e, []string{be.addr}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			cl := h2cClient(nil)
			for i := range 3 {
				req, _ := http.NewRequest("GET", "http://"+h.addr+"/core?i=x", nil)
				req.Host = "a.test"
				resp, err := cl.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "hello world" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				if resp.Header.Get("X-B") != "1" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Request-Id") == "" {
					t.Errorf("request %d: response head %v", i, resp.Header)
				}
			}
			be.mu.Lock()
			defer be.mu.Unlock()
			if len(be.reqs) != 3 {
				t.Fatalf("backend got %d requests", len(be.reqs))
			}
			for i, r := range be.reqs {
				if !strings.HasPrefix(r, "GET /core?i=x HTTP/1.1\r\nHost: a.test\r\n") {
					t.Errorf("request %d: %q", i, r)
				}
				for _, want := range []string{"X-Forwarded-For: 127.0.0.1\r\n", "X-Forwarded-Proto: http\r\n", "X-Forwarded-Host: a.test\r\n"} {
					if !strings.Contains(r, want) {
						t.Errorf("request %d: no %q in %q", i, want, r)
					}
				}
				if strings.Contains(strings.ToLower(r), "content-length") {
					t.Errorf("request %d: a body-less request with a Content-Length: %q", i, r)
				}
			}
			if be.conn[0] != be.conn[1] || be.conn[1] != be.conn[2] {
				t.Errorf("backend connections %v: the connection was not kept", be.conn)
			}
		})
	}
}
