//go:build linux

package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// h2loop_test.go: HTTP/2 over TLS on the event loops (h2loop_linux.go,
// evloop/h2_linux.go). The h2 tests over TLS elsewhere (drain, write
// timeout, access log, OCSP, the guard) run on this path too, since it is
// the default; these are the cases particular to it.

// h2LoopProxy starts a TLS listener for backend be with the loops (h2 on
// them), mod applied, and returns it with its loop counters.
func h2LoopProxy(t *testing.T, be string, mod func(*policy.Snapshot, *policy.App)) (*harness, *loopDelta) {
	t.Helper()
	cf, kf := writeTestCert(t)
	h := startProxyOpts(t, []string{be}, Options{Engine: EngineLoops, H2: H2Own}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		if mod != nil {
			mod(s, a)
		}
	})
	return h, loopCounts(t, h, EngineLoops)
}

// h2TLSRaw opens an h2 connection over TLS and sends the preface and
// settings.
func h2TLSRaw(t *testing.T, addr string, settings ...http2.Setting) (*tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q", p)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(settings...)
	return c, fr
}

// writeHead sends a header block of fields (name, value pairs) on id.
func writeHead(t *testing.T, fr *http2.Framer, id uint32, end bool, fields ...string) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// h2Answer is one stream's response as read off the wire.
type h2Answer struct {
	status  int
	fields  []hpack.HeaderField
	body    []byte
	ended   bool
	resetBy http2.ErrCode
	reset   bool
}

func (a *h2Answer) field(name string) string {
	for _, f := range a.fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// readAnswers reads frames until every stream in ids has ended or been
// reset, giving window back for what it reads (window true) or not.
func readAnswers(t *testing.T, fr *http2.Framer, window bool, ids ...uint32) map[uint32]*h2Answer {
	t.Helper()
	out := map[uint32]*h2Answer{}
	for _, id := range ids {
		out[id] = &h2Answer{}
	}
	open := len(ids)
	dec := hpack.NewDecoder(4096, nil)
	for open > 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading answers: %v", err)
		}
		a := out[f.Header().StreamID]
		switch f := f.(type) {
		case *http2.HeadersFrame:
			fs, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			if a != nil {
				for _, hf := range fs {
					if hf.Name == ":status" {
						a.status, _ = strconv.Atoi(hf.Value)
					} else {
						a.fields = append(a.fields, hf)
					}
				}
				if f.StreamEnded() {
					a.ended = true
					open--
				}
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 && window {
				fr.WriteWindowUpdate(0, uint32(n))
				if !f.StreamEnded() {
					fr.WriteWindowUpdate(f.StreamID, uint32(n))
				}
			}
			if a != nil {
				a.body = append(a.body, f.Data()...)
				if f.StreamEnded() {
					a.ended = true
					open--
				}
			}
		case *http2.RSTStreamFrame:
			if a != nil && !a.ended && !a.reset {
				a.reset, a.resetBy = true, f.ErrCode
				open--
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v while streams were open", f.ErrCode)
		}
	}
	return out
}

// TestH2LoopServes: on one h2 connection over TLS, GETs run on the loop
// and a POST with a body on a worker; both reach the backend as the header
// policy says (Host from :authority, forged forwarding headers replaced,
// cookie fields joined into one), and the answers come back with their
// fields (hop-by-hop ones dropped) and bodies.
func TestH2LoopServes(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", strings.Join([]string{r.Method, r.URL.RequestURI(), r.Host,
			strings.Join(r.Header.Values("Cookie"), "|"), r.Header.Get("X-Forwarded-For"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-In"), strconv.Itoa(len(b))}, " "))
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Set("Keep-Alive", "timeout=5")
		io.WriteString(w, "body:"+string(b))
	})
	h, d := h2LoopProxy(t, be, nil)
	_, fr := h2TLSRaw(t, h.addr)
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/g?q=1",
		"cookie", "c=1", "x-in", "v", "cookie", "d=2", "x-forwarded-for", "6.6.6.6", "x-forwarded-proto", "http")
	writeHead(t, fr, 3, false, ":method", "POST", ":scheme", "https", ":authority", "a.test", ":path", "/p",
		"content-length", "5")
	fr.WriteData(3, true, []byte("hello"))
	writeHead(t, fr, 5, true, ":method", "HEAD", ":scheme", "https", ":authority", "a.test", ":path", "/h")
	got := readAnswers(t, fr, true, 1, 3, 5)

	g := got[1]
	if g.status != 200 || string(g.body) != "body:" || g.field("x-seen") != "GET /g?q=1 a.test c=1; d=2 127.0.0.1 https v 0" {
		t.Errorf("GET: %d %q %v", g.status, g.body, g.fields)
	}
	cookies := 0
	for _, f := range g.fields {
		if f.Name == "set-cookie" {
			cookies++
		}
		if f.Name == "keep-alive" || f.Name == "connection" {
			t.Errorf("GET: hop-by-hop field %q passed on", f.Name)
		}
	}
	if cookies != 2 || g.field("x-request-id") == "" || g.field("content-length") != "5" {
		t.Errorf("GET fields: %v", g.fields)
	}
	p := got[3]
	if p.status != 200 || string(p.body) != "body:hello" || !strings.HasSuffix(p.field("x-seen"), " 5") {
		t.Errorf("POST: %d %q %v", p.status, p.body, p.fields)
	}
	hd := got[5]
	if hd.status != 200 || len(hd.body) != 0 || !hd.ended || hd.field("content-length") != "5" {
		t.Errorf("HEAD: %d %q %v", hd.status, hd.body, hd.fields)
	}
	d.check(t, 2, 0) // the GET and the HEAD; the POST went to a worker
}

// TestH2LoopChunkedSlowReader: a chunked answer, larger than the client's
// small stream window, reaches a client that opens the window a little at
// a time, whole and decoded (no chunk framing in the DATA).
func TestH2LoopChunkedSlowReader(t *testing.T) {
	want := make([]byte, 300<<10)
	for i := range want {
		want[i] = byte('a' + i%26)
	}
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		for off := 0; off < len(want); off += 10 << 10 {
			w.Write(want[off : off+10<<10])
			w.(http.Flusher).Flush()
		}
	})
	h, d := h2LoopProxy(t, be, nil)
	_, fr := h2TLSRaw(t, h.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1024})
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/c")
	a := readAnswers(t, fr, true, 1)[1]
	if a.status != 200 || !bytes.Equal(a.body, want) {
		t.Errorf("status %d, %d bytes (want %d), equal %v", a.status, len(a.body), len(want), bytes.Equal(a.body, want))
	}
	d.check(t, 1, 0)
}

// TestH2LoopResetCutsBackend: a stream the client resets while the backend
// works is cut there too (the backend's request ends), and the connection
// goes on serving.
func TestH2LoopResetCutsBackend(t *testing.T) {
	var cut atomic.Bool
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
				cut.Store(true)
			case <-time.After(3 * time.Second):
			}
			return
		}
		io.WriteString(w, "fast")
	})
	h, d := h2LoopProxy(t, be, nil)
	_, fr := h2TLSRaw(t, h.addr)
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/slow")
	time.Sleep(100 * time.Millisecond)
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	writeHead(t, fr, 3, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/fast")
	a := readAnswers(t, fr, true, 3)[3]
	if a.status != 200 || string(a.body) != "fast" {
		t.Errorf("after the reset: %d %q", a.status, a.body)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !cut.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !cut.Load() {
		t.Error("the backend's request went on after the client reset its stream")
	}
	// The second stream came on a connection that has reset one stream
	// in two (h2srv's Suspect): it went to a worker, which holds such
	// streams a moment (h2guard.go).
	d.check(t, 1, 0)
}

// TestH2LoopRespondsItself: answers sentry makes itself on a loop stream
// (no backend reachable: 502) are HEADERS and DATA like any other, and the
// connection goes on.
func TestH2LoopRespondsItself(t *testing.T) {
	dead := freeAddr(t) // nothing listens there
	h, d := h2LoopProxy(t, dead, nil)
	_, fr := h2TLSRaw(t, h.addr)
	for _, id := range []uint32{1, 3} {
		writeHead(t, fr, id, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
		a := readAnswers(t, fr, true, id)[id]
		if a.status != 502 && a.status != 503 || len(a.body) == 0 || a.field("content-type") == "" || a.field("x-request-id") == "" {
			t.Errorf("stream %d: %d %q %v", id, a.status, a.body, a.fields)
		}
	}
	d.check(t, 2, 0)
}

// TestH2LoopWindowStall: streams given no window are reset once
// server.write_timeout passes without progress (the loop's sweep), and
// the connection goes on serving a stream with a window.
func TestH2LoopWindowStall(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
			return
		}
		io.WriteString(w, "small")
	})
	h, _ := h2LoopProxy(t, be, func(s *policy.Snapshot, _ *policy.App) { s.Server.WriteTimeout = 300 * time.Millisecond })
	_, fr := h2TLSRaw(t, h.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	fr.WriteWindowUpdate(0, 1<<30)
	start := time.Now()
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/big")
	a := readAnswers(t, fr, false, 1)[1]
	if !a.reset || len(a.body) != 0 {
		t.Fatalf("stalled stream: reset %v, %d bytes", a.reset, len(a.body))
	}
	if e := time.Since(start); e < 300*time.Millisecond {
		t.Errorf("reset after %v, before write_timeout", e)
	}
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	writeHead(t, fr, 3, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/small")
	if a := readAnswers(t, fr, true, 3)[3]; a.status != 200 || string(a.body) != "small" {
		t.Errorf("after the stall: %d %q", a.status, a.body)
	}
}

// TestH2LoopIdleTimeout: a connection without streams for
// server.idle_timeout gets GOAWAY and is closed by the loop.
func TestH2LoopIdleTimeout(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h, _ := h2LoopProxy(t, be, func(s *policy.Snapshot, _ *policy.App) { s.Server.IdleTimeout = 300 * time.Millisecond })
	c, fr := h2TLSRaw(t, h.addr)
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
	start := time.Now()
	var sawEnd, sawGoAway bool
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // closed
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			sawEnd = sawEnd || f.StreamEnded()
		case *http2.GoAwayFrame:
			sawGoAway = f.ErrCode == http2.ErrCodeNo && f.LastStreamID == 1
		}
	}
	c.Close()
	if !sawEnd || !sawGoAway {
		t.Errorf("response ended %v, GOAWAY %v", sawEnd, sawGoAway)
	}
	if e := time.Since(start); e < 300*time.Millisecond || e > 5*time.Second {
		t.Errorf("closed after %v (idle_timeout 300ms)", e)
	}
}

// TestH2LoopOff: SENTRY_H2LOOP=0's switch leaves h2 over TLS on the
// goroutine driver while HTTP/1.1 stays on the loops.
func TestH2LoopOff(t *testing.T) {
	old := h2LoopDisabled
	h2LoopDisabled = true
	defer func() { h2LoopDisabled = old }()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h, d := h2LoopProxy(t, be, nil)
	_, fr := h2TLSRaw(t, h.addr)
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
	if a := readAnswers(t, fr, true, 1)[1]; a.status != 200 || string(a.body) != "ok" {
		t.Errorf("%d %q", a.status, a.body)
	}
	d.check(t, 0, 0)
}

// TestH2LoopParked: streams whose class waits for its batch run park in
// the loop like HTTP/1.1 requests (park_test.go's policy, over TLS): three
// streams at once are relayed after their runs; a class the estimator has
// learned to be too slow is rejected by its run (503, Retry-After); a
// stream the client resets while parked leaves the queue, counted
// client_gone, and never reaches the backend.
func TestH2LoopParked(t *testing.T) {
	cf, kf := writeTestCert(t)
	h, rb := startParkedWith(t, Options{Engine: EngineLoops, H2: H2Own}, func(pol string) string {
		return strings.Replace(pol, "    backends:", fmt.Sprintf("    tls: {cert: %q, key: %q}\n    backends:", cf, kf), 1)
	})
	d := loopCounts(t, h, EngineLoops)
	decided := func(class, verdict string) float64 {
		return metricValue(t, h.reg, "sentry_admission_decisions_total", map[string]string{"class": class, "verdict": verdict})
	}
	queued := func(class string) float64 {
		return metricValue(t, h.reg, "sentry_batch_queue_length", map[string]string{"class": class})
	}
	get := func(fr *http2.Framer, id uint32, path string) {
		writeHead(t, fr, id, true, ":method", "GET", ":scheme", "https", ":authority", "x", ":path", path)
	}
	_, fr := h2TLSRaw(t, h.addr)
	get(fr, 1, "/a1")
	get(fr, 3, "/a2")
	get(fr, 5, "/a3")
	got := readAnswers(t, fr, true, 1, 3, 5)
	for id, a := range got {
		if want := "ok /a" + strconv.Itoa(int(id+1)/2); a.status != 200 || string(a.body) != want {
			t.Errorf("stream %d: %d %q, want 200 %q", id, a.status, a.body, want)
		}
	}
	if v := decided("fast", "admitted"); v != 3 {
		t.Errorf("decisions{fast,admitted} = %v, want 3", v)
	}

	get(fr, 7, "/slow/learn")
	if a := readAnswers(t, fr, true, 7)[7]; a.status != 200 {
		t.Fatalf("first slow request: %d %q", a.status, a.body)
	}
	// On an idle farm with nothing waiting, the work-conserving rule
	// (docs/algorithms.md §10) admits it over its target.
	get(fr, 9, "/slow/idle")
	if a := readAnswers(t, fr, true, 9)[9]; a.status != 200 {
		t.Fatalf("slow request on an idle farm: %d %q, want admitted over target", a.status, a.body)
	}
	// With a request waiting (hold's, parked for its minute), the run's
	// verdict is the test's: rejected.
	_, fr2 := h2TLSRaw(t, h.addr)
	get(fr2, 1, "/hold/wait")
	waitUntil(t, "a stream waits in hold's queue", func() bool { return queued("hold") == 1 })
	get(fr, 11, "/slow/again")
	a := readAnswers(t, fr, true, 11)[11]
	if a.status != 503 || a.field("x-sentry-reject") != "rejected_test" || a.field("retry-after") == "" {
		t.Errorf("second slow request: %d %q %v, want a 503 rejected_test", a.status, a.body, a.fields)
	}
	fr2.WriteRSTStream(1, http2.ErrCodeCancel)
	waitUntil(t, "hold's queue empties", func() bool { return queued("hold") == 0 })

	get(fr, 13, "/hold")
	waitUntil(t, "the stream waits in hold's queue", func() bool { return queued("hold") == 1 })
	fr.WriteRSTStream(13, http2.ErrCodeCancel)
	waitUntil(t, "the stream leaves the queue", func() bool { return queued("hold") == 0 })
	waitUntil(t, "client_gone is counted", func() bool { return decided("hold", "client_gone") == 2 })
	for _, q := range rb.all() {
		if q.target == "/slow/again" || q.target == "/hold" || q.target == "/hold/wait" {
			t.Errorf("%s reached the backend", q.target)
		}
	}
	d.check(t, 8, 0) // 3 fast, 3 slow, 2 held
}

// TestH2LoopSlowReaderKeepsStream: a client that takes a large answer
// slowly, opening its window a little at a time, for longer than
// server.write_timeout in all, keeps its stream: the timeout runs from the
// last progress, not from when the stream first waited.
func TestH2LoopSlowReaderKeepsStream(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(want)))
		w.Write(want)
	})
	h, _ := h2LoopProxy(t, be, func(s *policy.Snapshot, _ *policy.App) { s.Server.WriteTimeout = 150 * time.Millisecond })
	// A 1 KiB window given back 15 ms after each frame: a backend read
	// (up to 16 KiB) waits for window for about 240 ms, all the while
	// making progress.
	_, fr := h2TLSRaw(t, h.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 10})
	start := time.Now()
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
	var got []byte
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			t.Fatalf("stream reset (%v) after %d bytes, %v", r.ErrCode, len(got), time.Since(start))
		}
		d, ok := f.(*http2.DataFrame)
		if !ok {
			continue
		}
		got = append(got, d.Data()...)
		if d.StreamEnded() {
			break
		}
		if n := len(d.Data()); n > 0 {
			time.Sleep(15 * time.Millisecond)
			fr.WriteWindowUpdate(0, uint32(n))
			fr.WriteWindowUpdate(1, uint32(n))
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%d bytes, want %d", len(got), len(want))
	}
	if e := time.Since(start); e < 300*time.Millisecond {
		t.Logf("took only %v: the test did not outlast write_timeout", e)
	}
}

// TestH2LoopTailStall: a response whose end waits for a window the client
// never opens (a small body, in one backend read: the exchange is over)
// is reset once write_timeout passes without progress, and the connection
// then idles out (GOAWAY, close) instead of being held by that stream.
func TestH2LoopTailStall(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") })
	h, _ := h2LoopProxy(t, be, func(s *policy.Snapshot, _ *policy.App) {
		s.Server.WriteTimeout = 300 * time.Millisecond
		s.Server.IdleTimeout = 300 * time.Millisecond
	})
	c, fr := h2TLSRaw(t, h.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	start := time.Now()
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
	var reset, goAway time.Duration
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // closed
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			reset = time.Since(start)
		case *http2.GoAwayFrame:
			goAway = time.Since(start)
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				t.Errorf("data sent without window")
			}
		}
	}
	c.Close()
	if reset < 300*time.Millisecond || goAway < reset {
		t.Errorf("reset after %v, GOAWAY after %v: want the reset after write_timeout, then GOAWAY", reset, goAway)
	}
	if e := time.Since(start); e > 5*time.Second {
		t.Errorf("closed after %v", e)
	}
}

// TestH2LoopManyFields: a backend head with as many fields as the loop's
// parser takes reaches the h2 client whole (its HEADERS are made from the
// backend's parsed head, not from a rewritten one parsed again).
func TestH2LoopManyFields(t *testing.T) {
	const n = 125 // with Date, Content-Length and Content-Type: pipeline.MaxRawFields
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < n; i++ {
			w.Header().Set("X-F"+strconv.Itoa(i), strconv.Itoa(i))
		}
		io.WriteString(w, "many")
	})
	h, d := h2LoopProxy(t, be, nil)
	_, fr := h2TLSRaw(t, h.addr)
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
	a := readAnswers(t, fr, true, 1)[1]
	if a.status != 200 || string(a.body) != "many" || a.field("x-f0") != "0" || a.field("x-f124") != "124" {
		t.Errorf("%d %q, %d fields", a.status, a.body, len(a.fields))
	}
	d.check(t, 1, 0)
}

// TestH2LoopPartialHeadTimesOut: a header block begun and never ended
// (HEADERS without END_HEADERS, no CONTINUATION) gets GOAWAY and the
// connection closes after read_header_timeout.
func TestH2LoopPartialHeadTimesOut(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h, _ := h2LoopProxy(t, be, func(s *policy.Snapshot, _ *policy.App) { s.Server.ReadHeaderTimeout = 300 * time.Millisecond })
	c, fr := h2TLSRaw(t, h.addr)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sawGoAway := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			sawGoAway = true
		}
	}
	c.Close()
	if e := time.Since(start); !sawGoAway || e < 250*time.Millisecond || e > 5*time.Second {
		t.Errorf("GOAWAY %v, closed after %v (read_header_timeout 300ms)", sawGoAway, e)
	}
}

// TestH2LoopResetNoAccessLine: a loop stream the client resets is counted
// in the metrics but writes no access-log line, as on the workers' path;
// a stream answered does.
func TestH2LoopResetNoAccessLine(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
			return
		}
		io.WriteString(w, "fast")
	})
	path := t.TempDir() + "/access.log"
	h, _ := h2LoopProxy(t, be, accessSnap(path, "text", 0, 0))
	_, fr := h2TLSRaw(t, h.addr)
	writeHead(t, fr, 1, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/fast")
	readAnswers(t, fr, true, 1)
	writeHead(t, fr, 3, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/slow")
	time.Sleep(100 * time.Millisecond)
	fr.WriteRSTStream(3, http2.ErrCodeCancel)
	time.Sleep(200 * time.Millisecond)
	h.p.ShutdownAll(t.Context())
	syncAccess(t, h.p)
	lines := readLines(t, path)
	if len(lines) != 1 || !strings.Contains(lines[0], "/fast") || !strings.Contains(lines[0], "HTTP/2.0") {
		t.Errorf("access log: %q, want the one line of /fast over HTTP/2.0", lines)
	}
}

// TestH2LoopMixedLoad: many streams at once on a few connections, GETs
// (the loop's) and POSTs with bodies (the workers'), some reset by the
// client mid-flight: every stream not reset gets its own answer whole, and
// nothing is left held afterwards (bounded: 4 connections x 60 streams).
func TestH2LoopMixedLoad(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("slow") != "" {
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(w, r.URL.Path+":"+strconv.Itoa(len(b)))
	})
	h, _ := h2LoopProxy(t, be, nil)
	fe := h.p.mu.fronts[h.addr]
	var wg sync.WaitGroup
	for conn := 0; conn < 4; conn++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", h.addr,
				&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(15 * time.Second))
			io.WriteString(c, http2.ClientPreface)
			fr := http2.NewFramer(c, c)
			fr.WriteSettings()
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			want := map[uint32]string{}
			resetIDs := map[uint32]bool{}
			for i := 0; i < 60; i++ {
				id := uint32(2*i + 1)
				path := "/s" + strconv.Itoa(conn) + "-" + strconv.Itoa(i)
				q := ""
				if i%5 == 0 {
					q = "?slow=1"
				}
				post := i%3 == 0
				method := "GET"
				if post {
					method = "POST"
				}
				hb.Reset()
				for _, f := range [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "a.test"}, {":path", path + q}} {
					enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: !post, EndHeaders: true})
				n := 0
				if post {
					n = 100 + i
					fr.WriteData(id, true, bytes.Repeat([]byte("b"), n))
				}
				if i%7 == 3 {
					fr.WriteRSTStream(id, http2.ErrCodeCancel)
					resetIDs[id] = true
					continue
				}
				want[id] = path + ":" + strconv.Itoa(n)
			}
			got := map[uint32][]byte{}
			done := map[uint32]bool{}
			dec := hpack.NewDecoder(4096, nil)
			for len(done) < len(want) {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Errorf("conn %d: %v after %d of %d streams", conn, err, len(done), len(want))
					return
				}
				switch f := f.(type) {
				case *http2.HeadersFrame:
					dec.DecodeFull(f.HeaderBlockFragment())
				case *http2.DataFrame:
					if n := len(f.Data()); n > 0 {
						fr.WriteWindowUpdate(0, uint32(n))
					}
					got[f.StreamID] = append(got[f.StreamID], f.Data()...)
					if f.StreamEnded() && !resetIDs[f.StreamID] {
						done[f.StreamID] = true
					}
				case *http2.RSTStreamFrame:
					if !resetIDs[f.StreamID] {
						t.Errorf("conn %d: stream %d reset by sentry (%v)", conn, f.StreamID, f.ErrCode)
						done[f.StreamID] = true
					}
				}
			}
			for id, w := range want {
				if string(got[id]) != w {
					t.Errorf("conn %d stream %d: %q, want %q", conn, id, got[id], w)
				}
			}
		}()
	}
	wg.Wait()
	// Every connection closed by its client: the loops hold none, and no
	// stream of theirs is left with a worker.
	waitUntil(t, "the loops let the connections go", func() bool { return fe.heldElsewhere() == 0 })
	waitUntil(t, "no h2 connection tracked", func() bool {
		fe.own.mu.Lock()
		defer fe.own.mu.Unlock()
		return len(fe.own.conns) == 0
	})
}

// TestBackendConnWait: with max_conns_per_backend reached, a request waits
// for a connection (at most timeouts.connect), on every engine, as
// fasthttp's HostClient does: the loops give a connection an exchange
// gives back to the first waiter, and answer 503 backend_busy only at the
// deadline. Over h2 (many streams on one connection, where the loops
// would otherwise reach the cap with few clients) and HTTP/1.1 alike.
//
// Two proxies per engine, so that neither half rests on how fast this
// machine runs: one whose connect timeout (5 s) no wait here comes near,
// where every request must wait its turn and none be refused; and one
// whose timeout (300 ms) every wait passes by far (the backend holds its
// two connections for 1.5 s), where the two requests beyond the cap must
// be refused at the deadline.
func TestBackendConnWait(t *testing.T) {
	var delay atomic.Int64
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(delay.Load()))
		io.WriteString(w, "ok")
	})
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) {
			cf, kf := writeTestCert(t)
			start := func(connect time.Duration) (*harness, func() float64) {
				h := startProxyOpts(t, []string{be}, Options{Engine: e, H2: H2Own}, func(_ *policy.Snapshot, a *policy.App) {
					a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
					a.MaxConnsPerBackend = 2
					a.Timeouts.Connect = connect
				})
				return h, func() float64 {
					return metricValue(t, h.reg, "sentry_proxy_errors_total", map[string]string{"reason": "backend_busy"})
				}
			}
			h, busy := start(5 * time.Second)
			// Eight streams of 50 ms on two connections: they wait for
			// each other, all within the connect timeout.
			delay.Store(int64(50 * time.Millisecond))
			_, fr := h2TLSRaw(t, h.addr)
			ids := []uint32{1, 3, 5, 7, 9, 11, 13, 15}
			for _, id := range ids {
				writeHead(t, fr, id, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/w")
			}
			for id, a := range readAnswers(t, fr, true, ids...) {
				if a.status != 200 || string(a.body) != "ok" {
					t.Errorf("h2 stream %d: %d %q", id, a.status, a.body)
				}
			}
			// HTTP/1.1 clients, four at once, as well.
			var wg sync.WaitGroup
			var failed atomic.Int32
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := cl.Get("https://" + h.addr + "/w1")
					if err != nil || resp.StatusCode != 200 {
						failed.Add(1)
					}
					if err == nil {
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			if n := failed.Load(); n > 0 || busy() != 0 {
				t.Errorf("%d HTTP/1.1 requests failed, backend_busy %v: want every request to wait its turn", n, busy())
			}
			// 1.5 s each against a 300 ms connect timeout: the third and
			// fourth wait past it and get 503 backend_busy.
			h, busy = start(300 * time.Millisecond)
			delay.Store(int64(1500 * time.Millisecond))
			_, fr = h2TLSRaw(t, h.addr)
			begun := time.Now()
			ids = []uint32{1, 3, 5, 7}
			for _, id := range ids {
				writeHead(t, fr, id, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/slow")
			}
			ok, rejected := 0, 0
			for id, a := range readAnswers(t, fr, true, ids...) {
				switch a.status {
				case 200:
					ok++
				case 503:
					rejected++
				default:
					t.Errorf("stream %d: %d %q", id, a.status, a.body)
				}
			}
			if ok != 2 || rejected != 2 || busy() != 2 {
				t.Errorf("%d answered, %d rejected, backend_busy %v: want 2, 2, 2", ok, rejected, busy())
			}
			if e := time.Since(begun); e < 300*time.Millisecond {
				t.Errorf("answered after %v, before the connect timeout", e)
			}
		})
	}
}

// TestH2LoopLargeHead: a request head too large for a stream's small
// buffer (2 KiB) is still served on the loop, from a full one; one too
// large for that goes to a worker, and is served too.
func TestH2LoopLargeHead(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strconv.Itoa(len(r.Header.Get("X-Big"))))
	})
	h, d := h2LoopProxy(t, be, func(s *policy.Snapshot, _ *policy.App) { s.Server.MaxHeaderBytes = 64 << 10 })
	_, fr := h2TLSRaw(t, h.addr)
	for i, n := range []int{5000, 20000} {
		id := uint32(2*i + 1)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a.test"}, {":path", "/"}, {"x-big", strings.Repeat("v", n)}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		block := hb.Bytes()
		first := min(len(block), 16000) // within the default frame size; CONTINUATION for the rest
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:first], EndStream: true, EndHeaders: first == len(block)})
		if first < len(block) {
			fr.WriteContinuation(id, true, block[first:])
		}
		if a := readAnswers(t, fr, true, id)[id]; a.status != 200 || string(a.body) != strconv.Itoa(n) {
			t.Errorf("%d-byte field: %d %q", n, a.status, a.body)
		}
	}
	d.check(t, 1, 0) // the 20000-byte head went to a worker
}
