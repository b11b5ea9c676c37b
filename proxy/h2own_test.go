package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// TestH2cServesAlike: a GET and a POST with a body, over h2c, give the
// same answer and reach the backend the same way on both engines (the
// loops hand the preface off to the h2 server; the portable engine's
// fasthttp listener finds it itself).
func TestH2cServesAlike(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("X-In")+" "+strconv.Itoa(len(b)))
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		io.WriteString(w, "body:"+string(b))
	})
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := startEngine(t, e, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			cl := h2cClient(nil)
			defer cl.CloseIdleConnections()
			req, _ := http.NewRequest("GET", "http://"+h.addr+"/g?q=1", nil)
			req.Header.Set("X-In", "v")
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != "body:" ||
				resp.Header.Get("X-Seen") != "GET /g?q=1 v 0" || len(resp.Header.Values("Set-Cookie")) != 2 {
				t.Errorf("GET: %d %q %v", resp.StatusCode, b, resp.Header)
			}
			resp, err = cl.Post("http://"+h.addr+"/p", "text/plain", strings.NewReader(strings.Repeat("x", 100000)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(b) != 100005 || resp.Header.Get("X-Seen") != "POST /p  100000" {
				t.Errorf("POST: %d %d bytes %v", resp.StatusCode, len(b), resp.Header.Get("X-Seen"))
			}
		})
	}
}

// h2cRaw opens an h2c connection and sends the preface and settings.
func h2cRaw(t *testing.T, addr string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(settings...)
	return c, fr
}

func writeGet(t *testing.T, fr *http2.Framer, id uint32, path string) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// TestOwnH2IdleTimeout: a connection without streams for
// server.idle_timeout gets GOAWAY and is closed.
func TestOwnH2IdleTimeout(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := startProxyOpts(t, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.H2C = true
		s.Server.IdleTimeout = 300 * time.Millisecond
	})
	c, fr := h2cRaw(t, h.addr)
	writeGet(t, fr, 1, "/")
	start := time.Now()
	var sawData, sawGoAway bool
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // closed
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			sawData = sawData || f.StreamEnded()
		case *http2.GoAwayFrame:
			sawGoAway = f.ErrCode == http2.ErrCodeNo && f.LastStreamID == 1
		}
	}
	c.Close()
	if !sawData || !sawGoAway {
		t.Errorf("response ended %v, GOAWAY %v", sawData, sawGoAway)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %v", d)
	}
}

// TestOwnH2WindowStallTimesOut: a client that gives a stream no window
// and never opens it has that stream reset once server.write_timeout
// passes without progress; the connection stays usable.
func TestOwnH2WindowStallTimesOut(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
		case "/mid": // held whole, sent with the stream's end (finish)
			w.Header().Set("Content-Length", "32768")
			w.Write(big[:32768])
		default:
			io.WriteString(w, "small")
		}
	})
	h := startProxyOpts(t, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.H2C = true
		s.Server.WriteTimeout = 300 * time.Millisecond
	})
	_, fr := h2cRaw(t, h.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	fr.WriteWindowUpdate(0, 1<<30)
	writeGet(t, fr, 1, "/big")
	writeGet(t, fr, 5, "/mid")
	reset := map[uint32]bool{}
	for len(reset) < 2 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no reset of the stalled streams (%v): %v", reset, err)
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			reset[r.StreamID] = true
		}
		if d, ok := f.(*http2.DataFrame); ok && len(d.Data()) > 0 {
			t.Fatalf("data sent without window")
		}
	}
	// The connection still serves: another stream with a window.
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	writeGet(t, fr, 7, "/small")
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("second stream: %v", err)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 7 && d.StreamEnded() {
			if string(d.Data()) != "small" && len(d.Data()) != 0 {
				t.Errorf("data %q", d.Data())
			}
			return
		}
	}
}

// TestOwnH2StopsReadingUnreadAnswers: a client that floods PINGs and
// reads none of the answers is no longer read from once the answers
// waiting reach ownReadLimit: its own writes stall (without that, the
// server would read on and buffer every answer).
func TestOwnH2StopsReadingUnreadAnswers(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {})
	h := startProxyOpts(t, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) { a.H2C = true })
	c, _ := h2cRaw(t, h.addr)
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	ping := make([]byte, 0, 17*4096)
	for range 4096 {
		ping = append(ping, 0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8)
	}
	_ = c.SetWriteDeadline(time.Now().Add(3 * time.Second))
	sent := 0
	for sent < 256<<20 {
		n, err := c.Write(ping)
		sent += n
		if err != nil {
			return // stalled: the server stopped reading
		}
	}
	t.Errorf("%d MiB of PINGs taken without any answer read", sent>>20)
}

// TestH2WorkersReuseRetireStop: a parked worker takes the next stream (no
// new goroutine), one parked for longer than h2WorkerIdle is retired by a
// later dispatch, and stop ends the parked ones.
func TestH2WorkersReuseRetireStop(t *testing.T) {
	served := make(chan *ownStream, 16)
	release := make(chan struct{})
	ws := &h2Workers{serve: func(st *ownStream) { served <- st; <-release }}
	base := 0
	waitGoroutines := func(want int) {
		t.Helper()
		for i := 0; i < 200 && int(ws.live.Load()) != want; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if n := ws.live.Load(); int(n) != want {
			t.Fatalf("%d workers, want %d", n, want)
		}
	}
	parked := func(n int) {
		t.Helper()
		for i := 0; i < 200; i++ {
			ws.mu.Lock()
			k := len(ws.idle)
			ws.mu.Unlock()
			if k == n {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("workers did not park")
	}
	// Three at once: three workers.
	for range 3 {
		ws.run(&ownStream{})
	}
	for range 3 {
		<-served
	}
	waitGoroutines(base + 3)
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	parked(3)
	// One more: a parked worker takes it.
	ws.run(&ownStream{})
	<-served
	release <- struct{}{}
	parked(3)
	waitGoroutines(base + 3)
	// Two of them parked long ago: the next dispatch retires them.
	ws.mu.Lock()
	old := time.Now().Add(-2 * h2WorkerIdle).UnixNano()
	ws.idle[0].parked, ws.idle[1].parked = old, old
	ws.mu.Unlock()
	ws.run(&ownStream{})
	<-served
	waitGoroutines(base + 1)
	release <- struct{}{}
	parked(1)
	ws.stop()
	waitGoroutines(base)
}

// h2cRequest sends a request (fields: name, value, ...) as stream 1 of
// a fresh h2c connection, in one write: the head, then body as one DATA
// frame that ends the stream (nil: the head ends it; empty: the stream
// is left open).
func h2cRequest(t *testing.T, addr string, body []byte, fields ...string) *http2.Framer {
	t.Helper()
	c, fr := h2cRaw(t, addr)
	var hb, out bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	w := http2.NewFramer(&out, nil)
	w.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: body == nil, EndHeaders: true})
	if len(body) > 0 {
		w.WriteData(1, true, body)
	}
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	return fr
}

// h2cExchange1 sends one request as raw frames on a fresh h2c connection
// and returns the response's status and head.
func h2cExchange1(t *testing.T, addr string, fields ...string) (int, http.Header) {
	t.Helper()
	fr := h2cRequest(t, addr, nil, fields...)
	dec := hpack.NewDecoder(4096, nil)
	status := 0
	hdr := http.Header{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if f.StreamID == 1 && status == 0 {
				hf, _ := dec.DecodeFull(f.HeaderBlockFragment())
				for _, h := range hf {
					if h.Name == ":status" {
						status, _ = strconv.Atoi(h.Value)
					} else {
						hdr.Add(h.Name, h.Value)
					}
				}
			}
			if f.StreamID == 1 && f.StreamEnded() {
				return status, hdr
			}
		case *http2.DataFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				return status, hdr
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				t.Fatalf("stream reset: %v", f.ErrCode)
			}
		}
	}
}

// TestH2HeaderPolicyOnTheWire: on both engines, over h2c, ":authority"
// wins over a host field, forwarding fields are replaced whatever their
// number or spelling, the load header is dropped, the backend's
// hop-by-hop response fields do not reach the client, a userinfo
// authority is 400 and CONNECT 405.
func TestH2HeaderPolicyOnTheWire(t *testing.T) {
	rb := startRawBackend(t, tableBackend)
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := startEngine(t, e, []string{rb.addr}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			r := &rig{h: h, rb: rb}
			tag := fmt.Sprintf("/h2w-%d", pathSeq.Add(1))
			st, hdr := h2cExchange1(t, h.addr, ":method", "GET", ":scheme", "http", ":authority", "a.test", ":path", tag,
				"host", "evil.test", "x-forwarded-for", "6.6.6.6", "x-forwarded-for", "7.7.7.7", "x_forwarded_for", "5.5.5.5",
				"x-forwarded-host", "evil", "x-forwarded-proto", "https", "x-request-id", "forged", "x-keep", "yes",
				"sentry-load", "0.00", "sentry_load", "3")
			if st != 200 {
				t.Fatalf("status %d", st)
			}
			got := r.received(tag)
			if len(got) != 1 {
				t.Fatalf("backend received %d requests", len(got))
			}
			q := got[0]
			if hv := q.header.Get("Host"); hv != "a.test" {
				t.Errorf("backend Host = %q, want :authority a.test", hv)
			}
			wantForwarding(t, q, &http.Response{Header: hdr}, "127.0.0.1", "http", "a.test", "")
			if q.header.Get("X-Keep") != "yes" {
				t.Errorf("end-to-end X-Keep dropped")
			}
			for _, k := range []string{"Keep-Alive", "Proxy-Authenticate"} {
				if v := hdr.Get(k); v != "" {
					t.Errorf("response hop-by-hop %s reached the client: %q", k, v)
				}
			}
			tag = fmt.Sprintf("/h2w-%d", pathSeq.Add(1))
			if st, _ := h2cExchange1(t, h.addr, ":method", "GET", ":scheme", "http", ":authority", "user:pw@a.test", ":path", tag); st != 400 {
				t.Errorf("authority with userinfo: %d, want 400", st)
			}
			if st, _ := h2cExchange1(t, h.addr, ":method", "CONNECT", ":authority", "a.test:443"); st != 405 {
				t.Errorf("CONNECT: %d, want 405", st)
			}
			if n := len(r.received(tag)); n != 0 {
				t.Errorf("backend received %d refused requests", n)
			}
		})
	}
}

// TestH2BodyFramingOnTheWire: on h2, max_body_bytes is applied before the
// body is read, as on HTTP/1.1, on both engines: with max_body_bytes 100,
// a content-length of 200 is 413 and a body without content-length 411
// (as a chunked HTTP/1.1 body), answered before the body comes (none is
// sent) and never relayed; a body within the limit is. An h2 request's
// trailers are never copied to the backend request.
func TestH2BodyFramingOnTheWire(t *testing.T) {
	rb := startRawBackend(t, tableBackend)
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := startEngine(t, e, []string{rb.addr}, Options{}, func(s *policy.Snapshot, a *policy.App) {
				a.H2C = true
				a.MaxBodyBytes = 100
			})
			r := &rig{h: h, rb: rb}
			post := func(tag string, cl string) *http2.Framer {
				_, fr := h2cRaw(t, h.addr)
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				f := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "a.test"}, {":path", tag}}
				if cl != "" {
					f = append(f, [2]string{"content-length", cl})
				}
				for _, kv := range f {
					enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
				}
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
				return fr
			}
			answer := func(fr *http2.Framer) (int, http.Header) {
				dec := hpack.NewDecoder(4096, nil)
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						t.Fatalf("no answer: %v", err)
					}
					if hf, ok := f.(*http2.HeadersFrame); ok && hf.StreamID == 1 {
						fs, _ := dec.DecodeFull(hf.HeaderBlockFragment())
						n, hdr := 0, http.Header{}
						for _, x := range fs {
							if x.Name == ":status" {
								n, _ = strconv.Atoi(x.Value)
							} else {
								hdr.Add(x.Name, x.Value)
							}
						}
						return n, hdr
					}
				}
			}
			status := func(fr *http2.Framer) int { n, _ := answer(fr); return n }
			for _, c := range []struct {
				cl   string
				want int
			}{{"200", 413}, {"", 411}} {
				tag := fmt.Sprintf("/h2bw-%d", pathSeq.Add(1))
				if got := status(post(tag, c.cl)); got != c.want {
					t.Errorf("content-length %q: %d, want %d", c.cl, got, c.want)
				}
				if n := len(r.received(tag)); n != 0 {
					t.Errorf("content-length %q: relayed %d times", c.cl, n)
				}
			}
			tag := fmt.Sprintf("/h2bw-%d", pathSeq.Add(1))
			fr := post(tag, "5")
			fr.WriteData(1, true, []byte("hello"))
			if got := status(fr); got != 200 {
				t.Errorf("a body within the limit: %d", got)
			}
			if got := r.received(tag); len(got) != 1 || string(got[0].body) != "hello" {
				t.Errorf("relayed %+v", got)
			}
			// Trailers, whatever they name, stay behind.
			tag = fmt.Sprintf("/h2bw-%d", pathSeq.Add(1))
			fr = post(tag, "5")
			fr.WriteData(1, false, []byte("hello"))
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			enc.WriteField(hpack.HeaderField{Name: "x-forwarded-host", Value: "evil.example"})
			enc.WriteField(hpack.HeaderField{Name: "x-trail", Value: "t"})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
			st, hdr := answer(fr)
			if st != 200 {
				t.Fatalf("a body with trailers: %d", st)
			}
			got := r.received(tag)
			if len(got) != 1 {
				t.Fatalf("backend received %d requests", len(got))
			}
			wantForwarding(t, got[0], &http.Response{Header: hdr}, "127.0.0.1", "http", "a.test", "")
			wantAbsent(t, got[0], "X-Trail")
			if len(got[0].trailer) != 0 || string(got[0].body) != "hello" {
				t.Errorf("backend body %q trailers %q", got[0].body, got[0].trailer)
			}
		})
	}
}

// BenchmarkH2Relay is an h2c GET through sentry to a fast backend, for
// allocs/op (ns/op on a shared machine says little; e2e/bench/tls.sh
// measures throughput).
func BenchmarkH2Relay(b *testing.B) {
	be := fastBackend(b)
	h := startProxyOpts(&testing.T{}, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	defer func() { b.StopTimer(); h.close() }()
	cl := h2cClient(nil)
	defer cl.CloseIdleConnections()
	url := "http://" + h.addr + "/x"
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := cl.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// TestOwnH2NoGoroutineLeft: after h2 connections served requests, reset
// a stream and sat idle, and the proxy shut down, none of the own
// server's goroutines (readers, writers, workers) is left.
func TestOwnH2NoGoroutineLeft(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(200 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	})
	h := startProxyOpts(t, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	cl := h2cClient(nil)
	for range 20 {
		resp, err := cl.Get("http://" + h.addr + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, fr := h2cRaw(t, h.addr) // an idle connection, and a stream reset in flight
	writeGet(t, fr, 1, "/slow")
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	_, _ = h2cRaw(t, h.addr)
	time.Sleep(50 * time.Millisecond)
	h.close()
	cl.CloseIdleConnections()
	var left string
	for range 300 {
		buf := make([]byte, 1<<20)
		all := string(buf[:runtime.Stack(buf, true)])
		left = ""
		for _, g := range strings.Split(all, "\n\n") {
			if strings.Contains(g, "proxy.(*ownConn)") || strings.Contains(g, "proxy.(*h2Workers).loop") ||
				strings.Contains(g, "proxy.(*frontend).serveOwnConn") {
				left += g + "\n\n"
			}
		}
		if left == "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("goroutines left after shutdown:\n%s", left)
}

// TestOwnH2Expect100: a request with "expect: 100-continue" gets a 100
// HEADERS once its body is wanted, then its answer after the body.
func TestOwnH2Expect100(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, "got "+string(b))
	})
	h := startProxyOpts(t, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	_, fr := h2cRaw(t, h.addr)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/e"},
		{"content-length", "5"}, {"expect", "100-continue"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	dec := hpack.NewDecoder(4096, nil)
	var statuses []string
	var body []byte
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("statuses %v: %v", statuses, err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			fs, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, x := range fs {
				if x.Name == ":status" {
					statuses = append(statuses, x.Value)
				}
			}
			if len(statuses) == 1 && statuses[0] == "100" {
				fr.WriteData(1, true, []byte("hello"))
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				if len(statuses) != 2 || statuses[0] != "100" || statuses[1] != "200" || string(body) != "got hello" {
					t.Errorf("statuses %v body %q", statuses, body)
				}
				return
			}
		}
	}
}

// h2cTry sends one request as raw frames on a fresh h2c connection and
// says how it was answered: "status N", "rst CODE" or "goaway CODE".
func h2cTry(t *testing.T, addr string, fields ...string) string {
	t.Helper()
	_, fr := h2cRaw(t, addr)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "error " + err.Error()
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			if hf, _ := dec.DecodeFull(f.HeaderBlockFragment()); len(hf) > 0 {
				return "status " + hf[0].Value
			}
		case *http2.RSTStreamFrame:
			return "rst " + f.ErrCode.String()
		case *http2.GoAwayFrame:
			return "goaway " + f.ErrCode.String()
		}
	}
}

// TestH2RequestLineOnTheWire: on both engines, a :method or :path
// that would split the backend's HTTP/1.1 request line never reaches the
// backend, and an absolute-form :path does not give the backend a Host
// other than the :authority the request was routed by.
func TestH2RequestLineOnTheWire(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heads := make(chan string, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head []string
					for {
						l, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if l == "\r\n" {
							break
						}
						head = append(head, strings.TrimRight(l, "\r\n"))
					}
					heads <- strings.Join(head, "\n")
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	pseudo := func(method, path string) []string {
		return []string{":method", method, ":scheme", "http", ":authority", "a.test", ":path", path}
	}
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := startEngine(t, e, []string{ln.Addr().String()}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
			for _, c := range []struct {
				name   string
				fields []string
			}{
				{"spaced method", pseudo("GET /x", "/p")},
				{"spaced path", pseudo("GET", "/a HTTP/1.0")},
				{"path not origin-form", pseudo("GET", "p")},
			} {
				if r := h2cTry(t, h.addr, c.fields...); r == "status 200" {
					t.Errorf("%s: %s", c.name, r)
				}
			}
			// The refused ones are not waited for: the good request's
			// head must be the first the backend sees.
			if r := h2cTry(t, h.addr, pseudo("GET", "http://evil.test/x")...); r != "status 200" && !strings.HasPrefix(r, "rst ") {
				t.Errorf("absolute-form path: %s", r)
			}
			if r := h2cTry(t, h.addr, pseudo("GET", "/ok")...); r != "status 200" {
				t.Errorf("good request: %s", r)
			}
			for done := false; !done; {
				select {
				case hd := <-heads:
					line, _, _ := strings.Cut(hd, "\n")
					if strings.Count(line, " ") != 2 || !strings.Contains(hd, "\nHost: a.test\n") {
						t.Errorf("backend got %q", hd)
					}
					done = line == "GET /ok HTTP/1.1"
				case <-time.After(5 * time.Second):
					t.Fatal("the good request did not reach the backend")
				}
			}
		})
	}
}

// TestOwnH2PartialHeadTimesOut: a header block the client never ends (a
// HEADERS without END_HEADERS, then silence) is given
// server.read_header_timeout from its start, as an HTTP/1.1 head is;
// the connection (which has no other stream) is closed, not kept forever.
// A CONTINUATION dribbled in does not extend the time.
func TestOwnH2PartialHeadTimesOut(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := startProxyOpts(t, []string{be}, Options{}, func(s *policy.Snapshot, a *policy.App) {
		a.H2C = true
		s.Server.ReadHeaderTimeout = 400 * time.Millisecond
		s.Server.IdleTimeout = time.Hour
	})
	c, fr := h2cRaw(t, h.addr)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	start := time.Now()
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes()[:2], EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := fr.WriteContinuation(1, false, hb.Bytes()[2:3]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, err := fr.ReadFrame(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open %v after a header block began", time.Since(start))
			}
			break
		}
	}
}

// TestOwnH2NoGoroutineLeftClientGone: connections whose client vanishes
// mid-body, mid-response, mid-head, or after a backend failure leave no
// connection goroutine and no worker serving a stream, without a
// shutdown (the parked workers are not counted).
func TestOwnH2NoGoroutineLeftClientGone(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond)
		}
		if r.URL.Path == "/big" {
			w.Write(bytes.Repeat([]byte("x"), 1<<20))
			return
		}
		io.WriteString(w, "ok")
	})
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	h := startProxyOpts(t, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	h2 := startProxyOpts(t, []string{deadAddr}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	head := func(method, path string, cl string, end bool) []byte {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", method}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if cl != "" {
			enc.WriteField(hpack.HeaderField{Name: "content-length", Value: cl})
		}
		return hb.Bytes()
	}
	// Mid-body: a POST whose body stops, then the client goes.
	c, fr := h2cRaw(t, h.addr)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head("POST", "/", "100000", false), EndHeaders: true})
	fr.WriteData(1, false, []byte("0123456789"))
	// Mid-response: a slow answer, and a big one never read (window shut).
	c2, fr2 := h2cRaw(t, h.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	fr2.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head("GET", "/slow", "", true), EndStream: true, EndHeaders: true})
	fr2.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: head("GET", "/big", "", true), EndStream: true, EndHeaders: true})
	// Mid-head.
	c3, fr3 := h2cRaw(t, h.addr)
	fr3.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head("GET", "/", "", true)[:3], EndStream: true})
	// A backend that refuses: 502, and the client goes at once.
	c4, fr4 := h2cRaw(t, h2.addr)
	fr4.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head("GET", "/", "", true), EndStream: true, EndHeaders: true})
	time.Sleep(100 * time.Millisecond) // the streams reach their workers
	for _, c := range []net.Conn{c, c2, c3, c4} {
		c.Close()
	}
	var left string
	for range 500 {
		buf := make([]byte, 1<<20)
		all := string(buf[:runtime.Stack(buf, true)])
		left = ""
		for _, g := range strings.Split(all, "\n\n") {
			if strings.Contains(g, "proxy.(*ownConn)") || strings.Contains(g, "proxy.(*frontend).serveOwnConn") ||
				strings.Contains(g, "proxy.(*frontend).serveOwnStream") || strings.Contains(g, "proxy.(*ownStream)") ||
				strings.Contains(g, "proxy.(*ownBody)") {
				left += g + "\n\n"
			}
		}
		if left == "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("goroutines left with the clients gone:\n%s", left)
}
