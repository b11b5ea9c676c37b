package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// Slow readers must cost sentry, not the farm (docs/buffering.md): clients
// that ask for large responses and never read them must not hold the
// backend's workers, nor its connections under max_conns_per_backend,
// while they do. Each test here runs a backend with a few workers (a
// semaphore, as a thread pool), lets slow clients ask for large
// responses and read nothing, then checks that the backend finished
// writing every one of them (its workers are free), that normal requests
// are all answered, and that sentry held the rest within its budget.

// workerBackend is an HTTP/1.1 backend with workers handlers: a request
// waits for a free one, and keeps it until its response is written.
type workerBackend struct {
	addr     string
	sem      chan struct{}
	bigDone  atomic.Int64 // large responses written to their end
	bigStart atomic.Int64
}

func startWorkerBackend(t *testing.T, workers int) *workerBackend {
	t.Helper()
	wb := &workerBackend{sem: make(chan struct{}, workers)}
	chunk := []byte(strings.Repeat("0123456789abcdef", 4096)) // 64 KiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case wb.sem <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		defer func() { <-wb.sem }()
		if r.URL.Path != "/big" {
			w.Header().Set("Content-Length", "2")
			_, _ = io.WriteString(w, "ok")
			return
		}
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		wb.bigStart.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush() // the last bytes are out: the worker is free
		}
		wb.bigDone.Add(1)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	wb.addr = ln.Addr().String()
	return wb
}

// slowTestLimits are the budget the slow-reader tests give sentry: small
// enough in memory that the large responses go to temporary files.
func slowTestLimits(t *testing.T) func(*policy.Snapshot) {
	dir := t.TempDir()
	return func(s *policy.Snapshot) {
		s.Server.ResponseBuffer = 1 << 20
		s.Server.ResponseBufferTotal = 32 << 20
		s.Server.ResponseTempFile = 1 << 30
		s.Server.ResponseTempFileTotal = 4 << 30
		s.Server.ResponseTempDir = dir
		s.Server.WriteTimeout = time.Minute
	}
}

// busy is how many requests sentry answered 503 backend_busy.
func busy(h *harness) float64 {
	return testutil.ToFloat64(h.p.metrics.errors.WithLabelValues("web", "backend_busy"))
}

// allAnswered waits (60 s at most) until every one of n slow requests is
// accounted for: its response written by the backend to its end, or
// refused at the cap; and at least one reached the backend.
func allAnswered(t *testing.T, h *harness, wb *workerBackend, n int) bool {
	t.Helper()
	return eventually(60*time.Second, func() bool {
		started := wb.bigStart.Load()
		return started > 0 && wb.bigDone.Load() == started && started+int64(busy(h)) >= int64(n)
	})
}

// smallWindowDialer dials with a small receive buffer set before the
// connect (so the window offered is small from the start): a client that
// does not read holds little in its kernel.
var smallWindowDialer = net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	if err != nil {
		return err
	}
	return serr
}}

// slowReader asks for size bytes over a connection whose receive buffer
// is small, and never reads.
func slowReader(t *testing.T, addr string, size int, useTLS bool) net.Conn {
	t.Helper()
	raw, err := smallWindowDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	c := raw
	if useTLS {
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS13})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		c = tc
	}
	if _, err := fmt.Fprintf(c, "GET /big?n=%d HTTP/1.1\r\nHost: x\r\n\r\n", size); err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually waits (at most limit, polling) for cond.
func eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// normalRequests sends n requests for a small response, each on its own
// connection, at once, and reports those not answered 200 within limit.
func normalRequests(t *testing.T, n int, limit time.Duration, get func() (int, error)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			code, err := get()
			switch {
			case err != nil:
				errs <- fmt.Sprintf("no answer after %v: %v", time.Since(start).Round(time.Millisecond), err)
			case code != 200:
				errs <- fmt.Sprintf("status %d after %v", code, time.Since(start).Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("normal request: %s", e)
	}
}

func getSmall(addr string, limit time.Duration, useTLS bool) func() (int, error) {
	return func() (int, error) {
		var c net.Conn
		var err error
		if useTLS {
			c, err = tls.DialWithDialer(&net.Dialer{Timeout: limit}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		} else {
			c, err = net.DialTimeout("tcp", addr, limit)
		}
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(limit))
		if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
}

// checkBudget checks that sentry's response buffers stayed within their
// limits (the budget's high-water marks, and the metrics that export
// them), and once the slow clients are gone, gave every byte back: no
// descriptor of a temporary file left open, and none with a name in the
// directory.
func checkBudget(t *testing.T, h *harness, release func()) {
	t.Helper()
	st := h.p.resp.Stats()
	lim := h.p.resp.Limits()
	if st.MemHigh > lim.MemTotal || st.FileHigh > lim.FileTotal {
		t.Errorf("buffers past the budget: memory %d of %d, files %d of %d", st.MemHigh, lim.MemTotal, st.FileHigh, lim.FileTotal)
	}
	if m := metricValue(t, h.reg, "sentry_response_buffer_bytes_max", map[string]string{"store": "memory"}); m != float64(st.MemHigh) || m == 0 {
		t.Errorf("sentry_response_buffer_bytes_max{store=memory} = %v, budget's high-water %d", m, st.MemHigh)
	}
	if n := metricValue(t, h.reg, "sentry_response_buffer_spilled_total", nil); n == 0 || n != float64(st.Spilled) {
		t.Errorf("sentry_response_buffer_spilled_total = %v, %d spilled", n, st.Spilled)
	}
	if open := tempFDs(t, lim.Dir); open == 0 {
		t.Errorf("no temporary file open in %s while responses are held", lim.Dir)
	}
	t.Logf("budget: %+v", st)
	release()
	if !eventually(10*time.Second, func() bool { s := h.p.resp.Stats(); return s.Mem == 0 && s.File == 0 && s.Responses == 0 }) {
		t.Errorf("buffers not given back once the slow clients left: %+v", h.p.resp.Stats())
	}
	if !eventually(5*time.Second, func() bool { return tempFDs(t, lim.Dir) == 0 }) {
		t.Errorf("%d temporary files still open", tempFDs(t, lim.Dir))
	}
	if ents, _ := os.ReadDir(lim.Dir); len(ents) != 0 {
		t.Errorf("temporary files with names left in %s: %v", lim.Dir, ents)
	}
	if v := metricValue(t, h.reg, "sentry_response_buffer_bytes", map[string]string{"store": "file"}); v != 0 {
		t.Errorf("sentry_response_buffer_bytes{store=file} = %v after the clients left", v)
	}
}

// tempFDs counts the process's descriptors open on files in dir.
func tempFDs(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, dir+"/") {
			n++
		}
	}
	return n
}

// TestSlowReadersSpareTheFarm: 8 clients that never read a 64 MB response
// from a 4-worker backend, and 50 that never read 8 MB ones, with and
// without max_conns_per_backend, on both engines and over TLS: the
// backend writes every response to its end (its workers are free), and
// normal requests are all answered.
func TestSlowReadersSpareTheFarm(t *testing.T) {
	if testing.Short() {
		t.Skip("moves about 1 GB through loopback")
	}
	cases := []struct {
		name     string
		clients  int
		size     int
		maxConns int
	}{
		{"8x64MB", 8, 64 << 20, 0},
		{"50x8MB", 50, 8 << 20, 0},
		{"50x8MB-maxconns20", 50, 8 << 20, 20},
	}
	for _, c := range cases {
		for _, e := range engines {
			for _, useTLS := range []bool{false, true} {
				name := c.name + "/" + e
				if useTLS {
					name += "/tls"
				}
				t.Run(name, func(t *testing.T) { slowReaders(t, e, useTLS, c.clients, c.size, c.maxConns) })
			}
		}
	}
}

// slowProxy starts a 4-worker backend and sentry (engine e, TLS or not,
// max_conns_per_backend maxConns if set) in front of it, with
// slowTestLimits.
func slowProxy(t *testing.T, e string, useTLS bool, maxConns int) (*harness, *workerBackend) {
	wb := startWorkerBackend(t, 4)
	limits := slowTestLimits(t)
	var cf, kf string
	if useTLS {
		cf, kf = writeTestCert(t)
	}
	h := startEngine(t, e, []string{wb.addr}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		limits(s)
		if maxConns > 0 {
			a.MaxConnsPerBackend = maxConns
		}
		a.Timeouts.Connect = 20 * time.Second // a request waits this long for a connection at the cap
		a.Timeouts.Response = 30 * time.Second
		if useTLS {
			a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		}
	})
	return h, wb
}

func slowReaders(t *testing.T, e string, useTLS bool, clients, size, maxConns int) {
	h, wb := slowProxy(t, e, useTLS, maxConns)
	slowPhase(t, h, wb, clients, func() net.Conn { return slowReader(t, h.addr, size, useTLS) },
		getSmall(h.addr, 15*time.Second, useTLS))
}

// slowPhase is a slow-reader test's course: clients slow clients (made
// by slow), normal requests (get) once the backend is busy with them,
// the backend's workers seen free (every large response written to its
// end), normal requests again, and the budget checked and given back.
func slowPhase(t *testing.T, h *harness, wb *workerBackend, clients int, slow func() net.Conn, get func() (int, error)) {
	t.Helper()
	var conns []net.Conn
	for i := 0; i < clients; i++ {
		conns = append(conns, slow())
	}
	// Once the backend is busy with them, normal requests come: each is
	// answered (the backend's workers are not held by the slow clients).
	if !eventually(30*time.Second, func() bool { return wb.bigStart.Load() >= 4 }) {
		t.Fatalf("the slow clients' requests did not reach the backend (%d)", wb.bigStart.Load())
	}
	normalRequests(t, 5, 15*time.Second, get)
	// Every large response is written by the backend to its end, though
	// no client reads: the workers are free again. (At
	// max_conns_per_backend a request that waited timeouts.connect for a
	// connection is answered 503 backend_busy and never reaches the
	// backend: on a slow machine some slow clients may be.)
	if !allAnswered(t, h, wb, clients) {
		t.Fatalf("the backend finished %d of %d large responses (started %d, %v refused at the cap): its workers are held by clients that do not read",
			wb.bigDone.Load(), clients, wb.bigStart.Load(), busy(h))
	}
	// And after them, as many again.
	normalRequests(t, 5, 15*time.Second, get)
	checkBudget(t, h, func() {
		for _, c := range conns {
			c.Close()
		}
	})
}

// TestSlowReadersSpareTheFarmH2: the same over HTTP/2 over TLS: each slow
// client opens its own connection, asks for a large response and reads
// nothing (not even frames); normal requests come over another h2
// connection.
func TestSlowReadersSpareTheFarmH2(t *testing.T) {
	if testing.Short() {
		t.Skip("moves about 0.5 GB through loopback")
	}
	for _, c := range []struct {
		name              string
		clients, size, mc int
	}{
		{"8x64MB", 8, 64 << 20, 0},
		{"50x8MB-maxconns20", 50, 8 << 20, 20},
	} {
		// On the loops (their stream connections) and on the h2 workers
		// (the portable engine keeps TLS and h2 off the loops:
		// serveCtx, the fasthttp path's serve).
		for _, e := range engines {
			t.Run(c.name+"/"+e, func(t *testing.T) { slowH2Readers(t, e, c.clients, c.size, c.mc) })
		}
	}
}

func slowH2Readers(t *testing.T, e string, clients, size, maxConns int) {
	h, wb := slowProxy(t, e, true, maxConns)
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 15 * time.Second}
	get := func() (int, error) {
		resp, err := cl.Get("https://" + h.addr + "/small")
		if err != nil {
			return 0, err
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	slowPhase(t, h, wb, clients, func() net.Conn { return slowH2Client(t, h.addr, size) }, get)
}

// slowH2Client opens an h2 connection over TLS, asks for size bytes on
// one stream and never reads anything from the connection again.
func slowH2Client(t *testing.T, addr string, size int) net.Conn {
	t.Helper()
	raw, err := smallWindowDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatal("h2 not negotiated")
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb strings.Builder
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/big?n=" + strconv.Itoa(size)}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte(hb.String()), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

// TestStalledClientBuffered: a client that stops reading a buffered
// response does not hold its backend, which writes the whole body at its
// own speed (its connection released, the exchange recorded as relayed);
// the client is still cut after server.write_timeout without progress,
// and the buffer is given back. Both engines.
func TestStalledClientBuffered(t *testing.T) {
	const size = 8 << 20
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			chunk := make([]byte, 64<<10)
			backendDone := make(chan error, 1)
			rb := startRawBackend(t, func(_ *rawBackend, _, _ int, q *beReq, c net.Conn, _ *bufio.Reader) bool {
				if q.target == "/small" {
					_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					return err == nil
				}
				_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
				for off := 0; off < size && err == nil; off += len(chunk) {
					_, err = c.Write(chunk)
				}
				backendDone <- err
				return err == nil
			})
			limits := slowTestLimits(t)
			h := startEngine(t, e, []string{rb.addr}, Options{}, func(s *policy.Snapshot, a *policy.App) {
				limits(s)
				s.Server.WriteTimeout = time.Second
			})
			c := slowReader(t, h.addr, 0, false)
			select {
			case err := <-backendDone:
				if err != nil {
					t.Fatalf("the backend was cut: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the backend could not write its response: the client that reads nothing holds it")
			}
			resp, body := rawRequest(t, h.addr, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("next request: %d %q", resp.StatusCode, body)
			}
			// The client, which takes nothing, is cut after the write
			// timeout: what was buffered for it is given back, and it
			// never gets the whole body.
			if !eventually(10*time.Second, func() bool { s := h.p.resp.Stats(); return s.Mem == 0 && s.File == 0 && s.Responses == 0 }) {
				t.Fatalf("buffers left: %+v", h.p.resp.Stats())
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if n >= size || err != nil {
				t.Errorf("the client read %d bytes and then %v; want fewer than the body, then the connection closed", n, err)
			}
			if v := testutil.ToFloat64(h.p.metrics.errors.WithLabelValues("web", "backend_timeout")); v != 0 {
				t.Errorf("errors{backend_timeout} = %v", v)
			}
		})
	}
}

// TestResponseBudgetBound: more slow readers than the budget can hold,
// and no temporary files: memory never passes response_buffer_total (the
// budget's high-water mark), the responses that found it full go on at
// their clients' pace (counted as "total"), and everything is given back
// when the clients leave. Both engines.
func TestResponseBudgetBound(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			wb := startWorkerBackend(t, 64)
			h := startEngine(t, e, []string{wb.addr}, Options{}, func(s *policy.Snapshot, a *policy.App) {
				s.Server.ResponseBuffer = 1 << 20
				s.Server.ResponseBufferTotal = 4 << 20
				s.Server.ResponseTempFile = 0
				a.Timeouts.Response = 30 * time.Second
			})
			var conns []net.Conn
			for i := 0; i < 20; i++ {
				conns = append(conns, slowReader(t, h.addr, 8<<20, false))
			}
			if !eventually(20*time.Second, func() bool { return h.p.resp.Stats().FullTotal > 0 && wb.bigStart.Load() == 20 }) {
				t.Fatalf("the budget was never found full: %+v (started %d)", h.p.resp.Stats(), wb.bigStart.Load())
			}
			st := h.p.resp.Stats()
			if st.MemHigh > 4<<20 || st.FileHigh != 0 || st.Spilled != 0 {
				t.Errorf("%+v: past the budget, or a file made with none allowed", st)
			}
			for _, c := range conns {
				c.Close()
			}
			if !eventually(10*time.Second, func() bool { s := h.p.resp.Stats(); return s.Mem == 0 && s.Responses == 0 }) {
				t.Errorf("buffers not given back: %+v", h.p.resp.Stats())
			}
		})
	}
}

// TestResponseTempDirChecked: a policy whose response_temp_dir cannot
// hold a temporary file is refused when applied (a reload keeps the
// policy in force), and the budget's limits follow a reload.
func TestResponseTempDirChecked(t *testing.T) {
	h := startProxy(t, []string{"127.0.0.1:1"}, nil)
	bad := testSnap(h.addr, []string{"127.0.0.1:1"}, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.ResponseTempDir = t.TempDir() + "/missing"
	})
	if err := h.p.Apply(bad); err == nil || !strings.Contains(err.Error(), "response_temp_dir") {
		t.Fatalf("Apply with a missing response_temp_dir: %v", err)
	}
	if got := h.p.resp.Limits().Dir; got != "" {
		t.Errorf("limits changed by a refused policy: dir %q", got)
	}
	dir := t.TempDir()
	good := testSnap(h.addr, []string{"127.0.0.1:1"}, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.ResponseTempDir = dir
		s.Server.ResponseBuffer = 64 << 10
	})
	if err := h.p.Apply(good); err != nil {
		t.Fatal(err)
	}
	if l := h.p.resp.Limits(); l.Dir != dir || l.Mem != 64<<10 {
		t.Errorf("limits after reload: %+v", l)
	}
	// Buffering off: no directory is asked of.
	off := testSnap(h.addr, []string{"127.0.0.1:1"}, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.ResponseTempDir = dir + "/missing"
		s.Server.ResponseBuffer = 0
	})
	if err := h.p.Apply(off); err != nil || h.p.resp.On() {
		t.Errorf("buffering off: %v, on %v", err, h.p.resp.On())
	}
}

// TestH2StalledWindowBuffered: an h2 client that reads its connection but
// never opens its stream's window: the backend still writes the whole
// response (buffered), and after server.write_timeout without progress
// the stream is reset (the buffer given back); the connection goes on,
// and another stream on it is answered. On the loops and the workers.
func TestH2StalledWindowBuffered(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			wb := startWorkerBackend(t, 4)
			limits := slowTestLimits(t)
			cf, kf := writeTestCert(t)
			h := startEngine(t, e, []string{wb.addr}, Options{}, func(s *policy.Snapshot, a *policy.App) {
				limits(s)
				s.Server.WriteTimeout = time.Second
				a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
			})
			raw, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(c, c)
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			request := func(id uint32, path string) {
				var hb strings.Builder
				enc := hpack.NewEncoder(&hb)
				for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", path}} {
					_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte(hb.String()), EndStream: true, EndHeaders: true}); err != nil {
					t.Fatal(err)
				}
			}
			request(1, "/big?n="+strconv.Itoa(8<<20))
			// Read frames (the connection is read; only the window stays
			// shut) until stream 1 is reset.
			var got1 int
			reset := false
			for !reset {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("reading frames (%d bytes of stream 1 so far): %v", got1, err)
				}
				switch f := f.(type) {
				case *http2.DataFrame:
					if f.StreamID == 1 {
						got1 += len(f.Data())
					}
				case *http2.RSTStreamFrame:
					if f.StreamID == 1 {
						reset = true
					}
				case *http2.SettingsFrame:
					if !f.IsAck() {
						_ = fr.WriteSettingsAck()
					}
				}
			}
			if wb.bigDone.Load() != 1 {
				t.Errorf("the backend did not finish the response (%d)", wb.bigDone.Load())
			}
			if got1 >= 8<<20 {
				t.Errorf("stream 1 got %d bytes with its window shut", got1)
			}
			if !eventually(5*time.Second, func() bool { s := h.p.resp.Stats(); return s.Mem == 0 && s.File == 0 && s.Responses == 0 }) {
				t.Errorf("buffers left after the reset: %+v", h.p.resp.Stats())
			}
			// The connection goes on: its window opened again for
			// another stream, which is answered.
			_ = fr.WriteWindowUpdate(0, 1<<20)
			request(3, "/small")
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("stream 3: %v", err)
				}
				if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 3 {
					if string(d.Data()) != "ok" {
						t.Errorf("stream 3: %q", d.Data())
					}
					break
				}
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 3 {
					t.Fatalf("stream 3 reset: %v", r.ErrCode)
				}
			}
		})
	}
}

// TestStreamingResponsesNotBuffered: server-sent events, gRPC-Web and a
// backend's "X-Accel-Buffering: no" go to a slow client as they come,
// never into a buffer (the backend is paced by the client, as nginx
// does); X-Accel-Buffering is not passed on. Both engines.
func TestStreamingResponsesNotBuffered(t *testing.T) {
	const size = 4 << 20
	for _, c := range []struct{ name, header string }{
		{"event-stream", "Content-Type: text/event-stream"},
		{"grpc-web", "Content-Type: application/grpc-web+proto"},
		{"accel-no", "X-Accel-Buffering: no"},
	} {
		for _, e := range engines {
			t.Run(c.name+"/"+e, func(t *testing.T) {
				started := make(chan struct{}, 1)
				rb := startRawBackend(t, func(_ *rawBackend, _, _ int, q *beReq, conn net.Conn, _ *bufio.Reader) bool {
					if q.target == "/small" {
						_, err := fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\n%s\r\nContent-Length: 2\r\n\r\nok", c.header)
						return err == nil
					}
					_, err := fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\n%s\r\nContent-Length: %d\r\n\r\n", c.header, size)
					started <- struct{}{}
					chunk := make([]byte, 64<<10)
					for off := 0; off < size && err == nil; off += len(chunk) {
						_, err = conn.Write(chunk)
					}
					return err == nil
				})
				limits := slowTestLimits(t)
				h := startEngine(t, e, []string{rb.addr}, Options{}, func(s *policy.Snapshot, _ *policy.App) { limits(s) })
				resp, body := rawRequest(t, h.addr, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != 200 || body != "ok" || resp.Header.Get("X-Accel-Buffering") != "" {
					t.Fatalf("small: %d %q %v", resp.StatusCode, body, resp.Header)
				}
				slowReader(t, h.addr, 0, false) // (the backend ignores the size)
				<-started
				// The backend writes as the client (which reads nothing)
				// lets it: nothing of it is ever held in a buffer.
				for i := 0; i < 50; i++ {
					if st := h.p.resp.Stats(); st.Responses != 0 || st.MemHigh != 0 {
						t.Fatalf("a streaming response was buffered: %+v", st)
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
	}
}
