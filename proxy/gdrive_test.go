package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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
					rq := head.String()
					if i := strings.Index(strings.ToLower(rq), "\r\ncontent-length: "); i >= 0 {
						var cl int
						fmt.Sscanf(rq[i+len("\r\ncontent-length: "):], "%d", &cl)
						body := make([]byte, cl)
						if _, err := io.ReadFull(br, body); err != nil {
							return
						}
						rq += string(body)
					}
					b.mu.Lock()
					b.reqs, b.conn = append(b.reqs, rq), append(b.conn, n)
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

// TestH2WorkerStreamBodyOnTheCore: a stream with a body of declared
// length that request_buffer holds goes to the goroutine driver too: the
// body is read whole before the decision and sent after the head, on the
// kept connection, with the client's content-length.
func TestH2WorkerStreamBodyOnTheCore(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			be := startCoreBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			h := startEngine(t, e, []string{be.addr}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			cl := h2cClient(nil)
			for i := range 2 {
				resp, err := cl.Post("http://"+h.addr+"/up", "text/plain", strings.NewReader("hello"))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "ok" {
					t.Fatalf("post %d: %d %q", i, resp.StatusCode, body)
				}
			}
			be.mu.Lock()
			defer be.mu.Unlock()
			if len(be.reqs) != 2 || be.conn[0] != be.conn[1] {
				t.Fatalf("backend requests %q on connections %v", be.reqs, be.conn)
			}
			for i, r := range be.reqs {
				if !strings.HasPrefix(r, "POST /up HTTP/1.1\r\nHost: ") || !strings.Contains(r, "content-length: 5\r\n") ||
					!strings.HasSuffix(r, "\r\n\r\nhello") {
					t.Errorf("request %d: %q", i, r)
				}
			}
		})
	}
}

// TestH2WorkerStreamParks: on the goroutine driver (h2c, the portable
// engine), a stream whose class waits for its batch run parks (its
// Waker is the driver's channel) and is relayed after the run; a stream
// reset while parked leaves the queue, counted client_gone, and nothing
// reaches the backend.
func TestH2WorkerStreamParks(t *testing.T) {
	h, rb := startParkedWith(t, policy.EnginePortable, func(p string) string {
		return strings.Replace(p, "    listen: ", "    h2c: true\n    listen: ", 1)
	})
	cl := h2cClient(nil)
	decided := func(class, verdict string) float64 {
		return metricValue(t, h.reg, "sentry_admission_decisions_total", map[string]string{"class": class, "verdict": verdict})
	}
	for i := range 2 {
		path := "/a" + strconv.Itoa(i)
		resp, err := cl.Get("http://" + h.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok "+path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	if v := metricValue(t, h.reg, "sentry_batch_wait_seconds", map[string]string{"class": "fast"}); v != 2 {
		t.Errorf("batch waits of fast = %v, want 2 (each stream waited for a run)", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+h.addr+"/hold/gone", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := cl.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitUntil(t, "the stream waits in hold's queue", func() bool {
		return metricValue(t, h.reg, "sentry_batch_queue_length", map[string]string{"class": "hold"}) == 1
	})
	cancel() // RST_STREAM
	<-errc
	waitUntil(t, "client_gone is counted", func() bool { return decided("hold", "client_gone") == 1 })
	waitUntil(t, "the queue is empty", func() bool {
		return metricValue(t, h.reg, "sentry_batch_queue_length", map[string]string{"class": "hold"}) == 0
	})
	for _, q := range rb.all() {
		if strings.HasPrefix(q.target, "/hold") {
			t.Errorf("the backend saw %s", q.target)
		}
	}
}

// TestH2WorkerStreamBodilessHeadOnTheCore: the head of a response without
// a body, which the goroutine driver holds until the exchange is recorded
// (holdHead), reaches the client whole: the backend's fields under the
// response policy and the request ID.
func TestH2WorkerStreamBodilessHeadOnTheCore(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			be := startCoreBackend(t, "HTTP/1.1 204 No Content\r\nX-B: 2\r\nX-C: three\r\nKeep-Alive: timeout=5\r\n\r\n")
			h := startEngine(t, e, []string{be.addr}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			cl := h2cClient(nil)
			for i := range 2 {
				resp, err := cl.Get("http://" + h.addr + "/none")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 204 || len(body) != 0 {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				if resp.Header.Get("X-B") != "2" || resp.Header.Get("X-C") != "three" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Request-Id") == "" {
					t.Errorf("request %d: response head %v", i, resp.Header)
				}
			}
		})
	}
}
