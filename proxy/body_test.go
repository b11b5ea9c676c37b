package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sentry-proxy/sentry/policy"
)

// countingBackend answers every request with the length of the body it
// read and how it was framed, and counts connections open at once (peak)
// and requests.
type countingBackend struct {
	addr           string
	open, peak     atomic.Int64
	reqs, posts    atomic.Int64
	lastTE, lastCL atomic.Value
}

func newCountingBackend(t *testing.T) *countingBackend {
	cb := &countingBackend{}
	cb.lastTE.Store("")
	cb.lastCL.Store("")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cb.reqs.Add(1)
			if r.Method == http.MethodPost {
				cb.posts.Add(1)
			}
			cb.lastTE.Store(strings.Join(r.TransferEncoding, ","))
			cb.lastCL.Store(r.Header.Get("Content-Length"))
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d", n)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				if n := cb.open.Add(1); n > cb.peak.Load() {
					cb.peak.Store(n)
				}
			case http.StateClosed, http.StateHijacked:
				cb.open.Add(-1)
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	cb.addr = ln.Addr().String()
	return cb
}

// slowClient opens a connection, sends a head and then the body a few
// bytes at a time, every gap, until stop is closed, then reads the
// response (if any). It reports the status (0: none).
func slowClient(addr, head string, piece string, gap time.Duration, stop <-chan struct{}, limit time.Duration) int {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return -1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	if _, err := io.WriteString(c, head); err != nil {
		return -1
	}
	done := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	t := time.NewTicker(gap)
	defer t.Stop()
	for {
		select {
		case st := <-done:
			return st
		case <-stop:
			return <-done
		case <-t.C:
			if _, err := io.WriteString(c, piece); err != nil {
				return <-done
			}
		}
	}
}

// slowBodyAttack: n connections trickle request bodies; meanwhile normal
// clients keep being served, the attackers hold no backend connection and
// are not in flight, and each attacker ends with 408 when body_timeout
// passes. Then normal clients are served again.
func slowBodyAttack(t *testing.T, n int, chunked bool) {
	cb := newCountingBackend(t)
	h := startProxy(t, []string{cb.addr}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.BodyTimeout = 2 * time.Second
		s.Server.BodyMinRate = 0 // body_timeout alone cuts them here
		a.MaxConnsPerBackend = 20
	})
	head := "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
	piece := "abcdef"
	if chunked {
		head = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
		piece = "6\r\nabcdef\r\n"
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- slowClient(h.addr, head, piece, 200*time.Millisecond, stop, 10*time.Second)
		}()
	}
	// During the attack: normal GETs and small POSTs succeed, and nothing
	// of the attackers is in flight or at the backend.
	time.Sleep(300 * time.Millisecond) // let the attackers connect and send heads
	ok, total := 0, 0
	var maxInflight int64
	client := &http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(1200 * time.Millisecond); time.Now().Before(deadline); {
		for _, post := range []bool{false, true} {
			var resp *http.Response
			var err error
			if post {
				resp, err = client.Post(h.url("/normal"), "text/plain", strings.NewReader("hello"))
			} else {
				resp, err = client.Get(h.url("/normal"))
			}
			total++
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && (!post || string(b) == "5") {
					ok++
				}
			}
		}
		if in := h.p.cur.Load().apps[0].Pool.Inflight(); in > maxInflight {
			maxInflight = in
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d slow bodies (chunked %v): %d of %d normal requests succeeded during the attack; in flight peaked at %d, backend connections at %d",
		n, chunked, ok, total, maxInflight, cb.peak.Load())
	if ok != total {
		t.Errorf("during the attack %d of %d normal requests succeeded", ok, total)
	}
	if p := cb.posts.Load(); p != int64(total/2) {
		t.Errorf("backend saw %d POSTs, want only the %d normal ones (an attacker's request reached it)", p, total/2)
	}
	if maxInflight > 2 {
		t.Errorf("in flight reached %d with %d slow bodies", maxInflight, n)
	}
	if pk := cb.peak.Load(); pk > 4 {
		t.Errorf("backend connections peaked at %d with %d slow bodies", pk, n)
	}
	// body_timeout cuts every attacker with 408.
	wg.Wait()
	close(stop)
	close(statuses)
	got408 := 0
	for st := range statuses {
		if st == 408 {
			got408++
		}
	}
	if got408 != n {
		t.Errorf("%d of %d slow clients got 408", got408, n)
	}
	// After: normal clients are served.
	for i := 0; i < 20; i++ {
		resp, err := client.Post(h.url("/after"), "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatalf("after the attack: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "1" {
			t.Fatalf("after the attack: %d %q", resp.StatusCode, b)
		}
	}
}

func TestSlowBodiesCostNoBackend(t *testing.T)        { slowBodyAttack(t, 200, false) }
func TestSlowChunkedBodiesCostNoBackend(t *testing.T) { slowBodyAttack(t, 200, true) }

// TestSlowBodiesMany is the same with more attackers; set
// SENTRY_SLOW_BODIES to the count (e.g. 2000) to run it.
func TestSlowBodiesMany(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SENTRY_SLOW_BODIES"))
	if n <= 0 {
		t.Skip("set SENTRY_SLOW_BODIES=2000 to run")
	}
	slowBodyAttack(t, n, false)
	slowBodyAttack(t, n, true)
}

// TestBodyMinRate: a body slower than body_min_rate gets 408 long before
// body_timeout, and nothing reaches the backend.
func TestBodyMinRate(t *testing.T) {
	cb := newCountingBackend(t)
	h := startProxy(t, []string{cb.addr}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.ReadHeaderTimeout = 300 * time.Millisecond
		s.Server.BodyTimeout = time.Minute
		s.Server.BodyMinRate = 100 // a 1000-byte body must be in within 0.3 s + 10 s
	})
	for _, chunked := range []bool{false, true} {
		head := "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
		piece := "x"
		if chunked {
			head = "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
			piece = "1\r\nx\r\n"
		}
		start := time.Now()
		// 1 byte per 100 ms is 10 B/s: the deadline (0.3 s + n/100 s)
		// comes before the next byte within the first second.
		st := slowClient(h.addr, head, piece, 100*time.Millisecond, nil, 20*time.Second)
		if st != 408 {
			t.Errorf("chunked=%v: status %d, want 408", chunked, st)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("chunked=%v: cut after %v; body_min_rate should cut within about a second", chunked, d)
		}
	}
	if r := cb.reqs.Load(); r != 0 {
		t.Errorf("backend saw %d requests", r)
	}
	// A body at a fair pace passes.
	resp, body := rawRequest(t, h.addr, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if resp.StatusCode != 200 || body != "3" {
		t.Errorf("normal body: %d %q", resp.StatusCode, body)
	}
}

// TestBufferedChunkedBody: a small chunked body is buffered and sent with
// its length; a chunked body larger than request_buffer streams whole;
// a known length larger than the buffer streams.
func TestBufferedChunkedBody(t *testing.T) {
	cb := newCountingBackend(t)
	h := startProxy(t, []string{cb.addr}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.RequestBuffer = 1 << 10
	})
	resp, body := rawRequest(t, h.addr, "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	if resp.StatusCode != 200 || body != "5" {
		t.Fatalf("small chunked: %d %q", resp.StatusCode, body)
	}
	if te, cl := cb.lastTE.Load().(string), cb.lastCL.Load().(string); te != "" || cl != "5" {
		t.Errorf("small chunked body reached the backend as TE %q CL %q; want Content-Length: 5", te, cl)
	}
	var big strings.Builder
	for i := 0; i < 10; i++ {
		big.WriteString("200\r\n" + strings.Repeat("y", 512) + "\r\n")
	}
	big.WriteString("0\r\n\r\n")
	resp, body = rawRequest(t, h.addr, "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+big.String())
	if resp.StatusCode != 200 || body != "5120" {
		t.Fatalf("large chunked: %d %q", resp.StatusCode, body)
	}
	if te := cb.lastTE.Load().(string); te != "chunked" {
		t.Errorf("large chunked body reached the backend as TE %q; want chunked (it streams)", te)
	}
	resp, body = rawRequest(t, h.addr, "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n"+strings.Repeat("z", 3000))
	if resp.StatusCode != 200 || body != "3000" {
		t.Fatalf("large Content-Length: %d %q", resp.StatusCode, body)
	}
}

// TestRequestBufferTotal: a body that would pass the process-wide cap gets
// 503 with Retry-After and the connection closes; bodiless requests pass.
func TestRequestBufferTotal(t *testing.T) {
	cb := newCountingBackend(t)
	h := startProxy(t, []string{cb.addr}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.RequestBufferTotal = 1000
	})
	// Head and body in separate writes: a body that comes with its head
	// in one read is the event loops' (held in their read buffer, not
	// counted), the rest is buffered here.
	resp, body := splitRequest(t, h.addr, "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", strings.Repeat("z", 2000))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Errorf("over the cap: %d %v close=%v %q", resp.StatusCode, resp.Header, resp.Close, body)
	}
	resp, body = splitRequest(t, h.addr, "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n", strings.Repeat("z", 500))
	if resp.StatusCode != 200 || body != "500" {
		t.Errorf("under the cap: %d %q", resp.StatusCode, body)
	}
	resp, _ = rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	if u := h.p.bufs.used.Load(); u != 0 {
		t.Errorf("%d buffered bytes still accounted after the requests ended", u)
	}
	if r := cb.posts.Load(); r != 1 {
		t.Errorf("backend saw %d POSTs, want 1", r)
	}
}

// TestStreamedBodyGivesNoMeasuredSample: with buffering off, the time from
// dispatch includes the client's upload, so it is not given to the
// estimator; a buffered body's is.
func TestStreamedBodyGivesNoMeasuredSample(t *testing.T) {
	cb := newCountingBackend(t)
	for _, off := range []bool{false, true} {
		ctl := &fakeControl{}
		h := startProxyOpts(t, []string{cb.addr}, Options{Control: ctl}, func(_ *policy.Snapshot, a *policy.App) {
			a.Admission.Mode = "batch"
			a.RequestBufferingOff = off
		})
		// Head first, then the body after a pause: the body is not in
		// the first read, so it streams (or is buffered).
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nX-Class: gold\r\nContent-Length: 4\r\n\r\nab")
		time.Sleep(150 * time.Millisecond)
		io.WriteString(c, "cd")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != 200 || string(b) != "4" {
			t.Fatalf("off=%v: %d %q", off, resp.StatusCode, b)
		}
		ctl.mu.Lock()
		ms, in := ctl.measured, ctl.inService
		ctl.mu.Unlock()
		if len(ms) != 1 {
			t.Fatalf("off=%v: %d observations", off, len(ms))
		}
		if off && (ms[0] != 0 || in[0] != 0) {
			t.Errorf("streamed body: measured %v inService %d given to the estimator; want none", ms[0], in[0])
		}
		if !off && (ms[0] <= 0 || ms[0] >= 150*time.Millisecond) {
			t.Errorf("buffered body: measured %v; want the backend's time only (> 0, without the client's 150 ms)", ms[0])
		}
	}
}

// splitRequest sends head, then body after a pause (so the request is not
// served by an event loop), and reads one response.
func splitRequest(t *testing.T, addr, head, body string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, head)
	time.Sleep(50 * time.Millisecond)
	io.WriteString(c, body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestWriteTimeoutFreesBackends: clients that never read a large response
// are cut after write_timeout on the fasthttp path, so with a small
// max_conns_per_backend normal requests are served again soon.
func TestWriteTimeoutFreesBackends(t *testing.T) {
	big := make([]byte, 8<<20)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
			return
		}
		io.WriteString(w, "ok")
	})
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.WriteTimeout = 300 * time.Millisecond
		a.MaxConnsPerBackend = 4
	})
	const readers = 8
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: 2 * time.Second}
	for i := 0; i < readers; i++ {
		c, err := d.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		// Split head: the connection goes to fasthttp.
		io.WriteString(c, "GET /big HTTP/1.1\r\nHo")
		time.Sleep(5 * time.Millisecond)
		io.WriteString(c, "st: x\r\n\r\n")
		conns = append(conns, c) // never read
	}
	attack := time.Now()
	client := &http.Client{Timeout: 2 * time.Second}
	get := func() bool {
		resp, err := client.Get(h.url("/small"))
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(b) == "ok"
	}
	for !get() {
		if time.Since(attack) > 8*time.Second { // (bounds the loop: a loaded CI machine writes 64 MiB slowly)
			t.Fatalf("normal requests still failing %v after %d non-reading clients (write_timeout 300ms)", time.Since(attack), readers)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("recovered after %v", time.Since(attack))
	for i := 0; i < 10; i++ {
		if !get() {
			t.Fatalf("normal request %d failed after recovery", i)
		}
	}
	// The non-reading clients were cut: fasthttp, which served them (and
	// nothing else here), holds no connection any more.
	srv := h.p.mu.fronts[h.addr].srv
	for srv.GetOpenConnectionsCount() > 0 {
		if time.Since(attack) > 10*time.Second {
			t.Fatalf("%d non-reading clients still connected", srv.GetOpenConnectionsCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStreamedBodyTooSlowIsNotBackendFailure: a body that streams (larger
// than request_buffer) and stalls is cut with 408, and the backend is not
// blamed (no 504, no failure counted toward passive health).
func TestStreamedBodyTooSlowIsNotBackendFailure(t *testing.T) {
	cb := newCountingBackend(t)
	h := startProxy(t, []string{cb.addr}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.RequestBuffer = 1 << 10
		s.Server.BodyTimeout = 500 * time.Millisecond
		s.Server.BodyMinRate = 0
		a.Health.Passive.Failures = 1
	})
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		time.Sleep(20 * time.Millisecond)
		io.WriteString(c, strings.Repeat("s", 20000)) // past fasthttp's 8 KiB pre-read; then nothing
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("stalled streamed body %d: no response: %v", i, err)
		}
		if resp.StatusCode != 408 {
			t.Errorf("stalled streamed body %d: %d, want 408", i, resp.StatusCode)
		}
	}
	a := h.p.cur.Load().apps[0]
	if a.Pool.Healthy() != 1 {
		t.Errorf("the backend was ejected for the client's stalls")
	}
	if v := testutil.ToFloat64(h.p.metrics.errors.WithLabelValues("web", "backend_timeout")); v != 0 {
		t.Errorf("backend_timeout = %v; the client's stall was blamed on the backend", v)
	}
	resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("after: %d %q", resp.StatusCode, body)
	}
}

// TestSlowChunkedAttackersLeave: chunked slow bodies whose clients hang up
// leave nothing behind: no buffered bytes accounted, nothing in flight,
// nothing at the backend, and normal requests are served.
func TestSlowChunkedAttackersLeave(t *testing.T) {
	cb := newCountingBackend(t)
	h := startProxy(t, []string{cb.addr}, nil)
	var conns []net.Conn
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	}
	for k := 0; k < 3; k++ {
		time.Sleep(100 * time.Millisecond)
		for _, c := range conns {
			io.WriteString(c, "6\r\nabcdef\r\n")
		}
	}
	a := h.p.cur.Load().apps[0]
	if u := h.p.bufs.used.Load(); u <= 0 {
		t.Errorf("no bytes buffered while 50 bodies are being read")
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(3 * time.Second)
	for h.p.bufs.used.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if u := h.p.bufs.used.Load(); u != 0 {
		t.Errorf("%d bytes still accounted after the clients left", u)
	}
	if n := a.Pool.Inflight(); n != 0 {
		t.Errorf("in flight %d after the clients left", n)
	}
	if r := cb.reqs.Load(); r != 0 {
		t.Errorf("backend saw %d requests from clients that never finished a body", r)
	}
	resp, body := splitRequest(t, h.addr, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "3\r\nabc\r\n0\r\n\r\n")
	if resp.StatusCode != 200 || body != "3" {
		t.Errorf("after: %d %q", resp.StatusCode, body)
	}
}

// TestTruncatedChunkedBodyNotForwardedWhole: a chunked body whose client
// hangs up between chunks is never passed on as a complete body, buffered
// or streamed (fasthttp's reader reports that close as the body's end).
func TestTruncatedChunkedBodyNotForwardedWhole(t *testing.T) {
	complete := make(chan string, 4)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil {
			complete <- string(b)
		}
	})
	for _, off := range []bool{false, true} {
		h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { a.RequestBufferingOff = off })
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
		time.Sleep(30 * time.Millisecond)
		io.WriteString(c, "3\r\nabc\r\n")
		time.Sleep(100 * time.Millisecond)
		c.Close()
		time.Sleep(200 * time.Millisecond)
		select {
		case b := <-complete:
			t.Errorf("buffering off=%v: the backend received the cut body %q as complete", off, b)
		default:
		}
	}
}
