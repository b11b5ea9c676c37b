package load

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer accepts connections on loopback and runs serve on each; it
// counts them.
func rawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

func poolOf(t *testing.T, cl *Client, target string) *pool {
	t.Helper()
	p, err := cl.pool(target)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wireFor(t *testing.T, method, target string) []byte {
	t.Helper()
	w, err := requestWire(method, target, "/x", "", http.Header{"X-Tier": {"gold"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestClientKeepAliveAndRetry: responses of every framing are read whole
// and their bytes counted; a kept-alive connection is reused; one the
// server closed after its response without saying so is replaced and the
// request sent again (a GET), not failed; Connection: close is obeyed.
func TestClientKeepAliveAndRetry(t *testing.T) {
	var served atomic.Int64
	target, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Header.Get("X-Tier") != "gold" || req.URL.Path != "/x" {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
				return
			}
			switch n := served.Add(1); {
			case n%4 == 1:
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
			case n%4 == 2:
				c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nX-Sentry-Reject: overload\r\nRetry-After: 2\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"))
			case n%4 == 3:
				// Answered, then closed without Connection: close: the
				// next request on it finds it gone.
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				return
			default:
				c.Write([]byte("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nz"))
				return
			}
		}
	})
	cl := newClient(Config{MaxInFlight: 4}, nil)
	defer cl.CloseIdle()
	wire := wireFor(t, http.MethodGet, target)
	for i := 0; i < 12; i++ {
		// The closing server's FIN must have arrived for the retry path
		// to be the one taken, not a lucky race.
		time.Sleep(5 * time.Millisecond)
		ex, err := poolOf(t, cl, target).do(context.Background(), wire, false, true, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want := []exchange{{200, 5, "", ""}, {503, 7, "2", "overload"}, {200, 2, "", ""}, {200, 1, "", ""}}[i%4]
		if ex != want {
			t.Fatalf("request %d: %+v, want %+v", i, ex, want)
		}
	}
	// Every fourth response closes (twice: n%4 == 3 and 0): 12 requests,
	// 6 closes, 7 connections at most, and at least 6 reused exchanges.
	if n := conns.Load(); n < 4 || n > 7 {
		t.Fatalf("%d connections for 12 requests with keep-alive", n)
	}
}

// TestClientErrors: a refused connection, a timeout, a reset before any
// response byte on a new connection (no retry: not a reused one), a POST
// not sent again, a HEAD's bodiless response and a cancelled run are told
// apart as the generator classifies them.
func TestClientErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	cl := newClient(Config{}, nil)
	defer cl.CloseIdle()
	_, err = poolOf(t, cl, refused).do(context.Background(), wireFor(t, "GET", refused), false, true, time.Now().Add(time.Second))
	if k := classify(err, nil); k != ErrRefused {
		t.Fatalf("refused: %v (%s)", err, k)
	}

	var requests atomic.Int64
	target, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			requests.Add(1)
			switch req.Method {
			case http.MethodHead:
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"))
			case http.MethodPost:
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
				return // closed after it: the next POST on it finds it gone
			case http.MethodDelete:
				c.(*net.TCPConn).SetLinger(0)
				return // reset, nothing answered
			default:
				time.Sleep(time.Second) // past the client's deadline
				return
			}
		}
	})
	ex, err := poolOf(t, cl, target).do(context.Background(), wireFor(t, http.MethodHead, target), true, true, time.Now().Add(5*time.Second))
	if err != nil || ex.status != 200 || ex.bytes != 0 {
		t.Fatalf("HEAD: %+v, %v", ex, err)
	}
	start := time.Now()
	_, err = poolOf(t, cl, target).do(context.Background(), wireFor(t, http.MethodGet, target), false, true, time.Now().Add(100*time.Millisecond))
	if k := classify(err, nil); k != ErrTimeout || time.Since(start) > 800*time.Millisecond {
		t.Fatalf("timeout: %v (%s) after %v", err, k, time.Since(start))
	}
	_, err = poolOf(t, cl, target).do(context.Background(), wireFor(t, http.MethodDelete, target), false, false, time.Now().Add(5*time.Second))
	if k := classify(err, nil); k != ErrReset && k != ErrEOF {
		t.Fatalf("reset: %v (%s)", err, k)
	}
	post := wireFor(t, http.MethodPost, target)
	if _, err := poolOf(t, cl, target).do(context.Background(), post, false, false, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	before := requests.Load()
	if _, err = poolOf(t, cl, target).do(context.Background(), post, false, false, time.Now().Add(5*time.Second)); err == nil {
		t.Fatal("a POST on a connection the server closed: no error (sent again?)")
	}
	if requests.Load() != before {
		t.Fatal("the server saw the failed POST")
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	_, err = poolOf(t, cl, target).do(ctx, wireFor(t, http.MethodGet, target), false, true, time.Now().Add(5*time.Second))
	if k := classify(err, ctx.Err()); k != ErrCanceled || time.Since(start) > 800*time.Millisecond || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("cancelled: %v (%s) after %v", err, k, time.Since(start))
	}
}

// TestClientIdleTimeout: a connection idle in the pool for idleTimeout is
// closed instead of used; a fresher one is used.
func TestClientIdleTimeout(t *testing.T) {
	cl := newClient(Config{}, nil)
	p, err := cl.pool("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer b.Close()
	c, d := net.Pipe()
	defer d.Close()
	stale, fresh := &clientConn{nc: a}, &clientConn{nc: c}
	p.put(fresh)
	p.put(stale)
	stale.idle = time.Now().Add(-idleTimeout)
	if got := p.get(); got != fresh {
		t.Fatalf("got %p, want the fresh connection %p", got, fresh)
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("the stale connection is still open")
	}
	if p.get() != nil {
		t.Fatal("the pool is not empty")
	}
}

// TestClientRetryDialsAndTimeoutKeepsPool: a GET that a reused connection
// lost is sent again on a new connection, not on the next pooled one,
// which the server may have closed too; a timeout is no loss: it is not
// sent again and costs the pool no other connection.
func TestClientRetryDialsAndTimeoutKeepsPool(t *testing.T) {
	var slow atomic.Bool
	target, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		if slow.Load() {
			time.Sleep(500 * time.Millisecond)
			return
		}
		// One answer, then the connection closes without saying so.
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	})
	cl := newClient(Config{}, nil)
	defer cl.CloseIdle()
	p := poolOf(t, cl, target)
	wire := wireFor(t, http.MethodGet, target)
	stale := func() {
		t.Helper()
		cc, err := p.dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, keep, _, err := cc.exchange(context.Background(), wire, false, time.Now().Add(5*time.Second)); err != nil || !keep {
			t.Fatalf("exchange: keep %v, %v", keep, err)
		}
		p.put(cc)
	}
	stale()
	stale()
	time.Sleep(20 * time.Millisecond) // both FINs in
	ex, err := p.do(context.Background(), wire, false, true, time.Now().Add(5*time.Second))
	if err != nil || ex.status != 200 {
		t.Fatalf("GET after two stale connections: %+v, %v", ex, err)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (two stale, one dialled for the retry)", n)
	}

	// The pool now holds the stale second one and the retry's: replace
	// them with two live connections to a slow answer.
	cl.CloseIdle()
	slow.Store(true)
	for i := 0; i < 2; i++ {
		cc, err := p.dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.put(cc)
	}
	before := conns.Load()
	_, err = p.do(context.Background(), wire, false, true, time.Now().Add(100*time.Millisecond))
	if k := classify(err, nil); k != ErrTimeout {
		t.Fatalf("slow GET: %v (%s)", err, k)
	}
	p.mu.Lock()
	left := len(p.idle)
	p.mu.Unlock()
	if left != 1 || conns.Load() != before {
		t.Fatalf("after a timeout: %d pooled (want 1), %d new connections (want 0)", left, conns.Load()-before)
	}
}
