package h2srv

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// client scripts one connection: frames written with x/net's Framer are
// fed to the Conn, and its output is parsed back into frames.
type client struct {
	t   *testing.T
	c   *Conn
	buf bytes.Buffer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
	err error
	// clock is the Conn's (Config.Now): it moves only when a test says.
	clock time.Time
}

// frame is one frame of the server's output, parsed.
type frame struct {
	typ     http2.FrameType
	stream  uint32
	flags   http2.Flags
	code    http2.ErrCode // RST_STREAM, GOAWAY
	lastID  uint32        // GOAWAY
	inc     uint32        // WINDOW_UPDATE
	data    []byte        // DATA
	fields  []hpack.HeaderField
	setting map[http2.SettingID]uint32
}

func newClient(t *testing.T, cfg Config) *client {
	cl := &client{t: t, clock: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return cl.clock } // a manual clock
	}
	cl.c = NewConn(cfg)
	cl.fr = http2.NewFramer(&cl.buf, nil)
	cl.enc = hpack.NewEncoder(&cl.hb)
	return cl
}

// start sends the preface and an empty SETTINGS, and drops the server's
// opening frames.
func (cl *client) start() {
	cl.buf.WriteString(Preface)
	cl.fr.WriteSettings()
	cl.feed()
	cl.out()
}

func (cl *client) feed() error {
	cl.err = cl.c.Feed(cl.buf.Bytes())
	cl.buf.Reset()
	return cl.err
}

// feedBytewise feeds what was written one byte at a time.
func (cl *client) feedBytewise() error {
	b := append([]byte(nil), cl.buf.Bytes()...)
	cl.buf.Reset()
	for i := range b {
		if cl.err = cl.c.Feed(b[i : i+1]); cl.err != nil {
			return cl.err
		}
	}
	return nil
}

func (cl *client) block(fields ...string) []byte {
	cl.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		cl.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), cl.hb.Bytes()...)
}

func (cl *client) get(id uint32, end bool, extra ...string) {
	b := cl.block(append([]string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/p"}, extra...)...)
	cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: end, EndHeaders: true})
}

// out parses and clears the server's output.
func (cl *client) out() []frame {
	cl.t.Helper()
	b := cl.c.TakeOutput(nil)
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	fr.SetMaxReadFrameSize(1 << 24)
	dec := hpack.NewDecoder(4096, nil)
	var fs []frame
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			return fs
		}
		if err != nil {
			cl.t.Fatalf("server output: %v", err)
		}
		h := f.Header()
		x := frame{typ: h.Type, stream: h.StreamID, flags: h.Flags}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			x.code = f.ErrCode
		case *http2.GoAwayFrame:
			x.code, x.lastID = f.ErrCode, f.LastStreamID
		case *http2.WindowUpdateFrame:
			x.inc = f.Increment
		case *http2.DataFrame:
			x.data = append([]byte(nil), f.Data()...)
		case *http2.HeadersFrame:
			x.fields, _ = dec.DecodeFull(f.HeaderBlockFragment())
		case *http2.SettingsFrame:
			x.setting = map[http2.SettingID]uint32{}
			f.ForeachSetting(func(s http2.Setting) error { x.setting[s.ID] = s.Val; return nil })
		}
		fs = append(fs, x)
	}
}

func (cl *client) events() []Event { return cl.c.TakeEvents(nil) }

func find(fs []frame, typ http2.FrameType) *frame {
	for i := range fs {
		if fs[i].typ == typ {
			return &fs[i]
		}
	}
	return nil
}

func fieldsOf(s *Stream) map[string]string {
	m := map[string]string{}
	for i := range s.NumFields() {
		k, v := s.Field(i)
		m[string(k)] = string(v)
	}
	return m
}

func TestPrefaceAndSettings(t *testing.T) {
	cl := newClient(t, Config{})
	fs := cl.out()
	if len(fs) != 2 || fs[0].typ != http2.FrameSettings || fs[1].typ != http2.FrameWindowUpdate {
		t.Fatalf("opening frames %+v", fs)
	}
	s := fs[0].setting
	if s[http2.SettingMaxConcurrentStreams] != 128 || s[http2.SettingInitialWindowSize] != defaultStreamWindow ||
		s[http2.SettingMaxHeaderListSize] != defaultMaxHeaderList {
		t.Errorf("settings %v", s)
	}
	if fs[1].inc != defaultConnWindow-65535 {
		t.Errorf("connection window update %d", fs[1].inc)
	}
	cl.buf.WriteString(Preface)
	cl.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
	cl.fr.WritePing(false, [8]byte{1, 2, 3})
	if err := cl.feedBytewise(); err != nil {
		t.Fatal(err)
	}
	fs = cl.out()
	if len(fs) != 2 || fs[0].typ != http2.FrameSettings || fs[0].flags&http2.FlagSettingsAck == 0 ||
		fs[1].typ != http2.FramePing || fs[1].flags&http2.FlagPingAck == 0 {
		t.Fatalf("after SETTINGS and PING: %+v", fs)
	}

	bad := newClient(t, Config{})
	bad.out()
	bad.buf.WriteString("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := bad.feed(); !errors.Is(err, ErrBadPreface) {
		t.Errorf("HTTP/1.1 instead of a preface: %v", err)
	}

	nos := newClient(t, Config{})
	nos.out()
	nos.buf.WriteString(Preface)
	nos.fr.WritePing(false, [8]byte{})
	nos.feed()
	if g := find(nos.out(), http2.FrameGoAway); g == nil || g.code != http2.ErrCodeProtocol {
		t.Errorf("PING before SETTINGS: %+v", g)
	}
}

func TestHeadersAcrossContinuation(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	b := cl.block(":method", "POST", ":scheme", "https", ":path", "/a/b?c=d", ":authority", "a.test",
		"content-type", "text/plain", "x-long", strings.Repeat("v", 300), "content-length", "5")
	cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:10]})
	cl.fr.WriteContinuation(1, false, b[10:200])
	cl.fr.WriteContinuation(1, true, b[200:])
	if err := cl.feedBytewise(); err != nil {
		t.Fatal(err)
	}
	evs := cl.events()
	if len(evs) != 1 || evs[0].Kind != EvRequest {
		t.Fatalf("events %+v", evs)
	}
	s := evs[0].S
	if string(s.Method()) != "POST" || string(s.Path()) != "/a/b?c=d" || string(s.Authority()) != "a.test" ||
		string(s.Scheme()) != "https" || s.ContentLength() != 5 || s.EndedByHead() {
		t.Errorf("head %q %q %q %q cl=%d", s.Method(), s.Path(), s.Authority(), s.Scheme(), s.ContentLength())
	}
	if f := fieldsOf(s); f["content-type"] != "text/plain" || len(f["x-long"]) != 300 {
		t.Errorf("fields %v", f)
	}
	cl.fr.WriteData(1, true, []byte("hello"))
	cl.feed()
	if evs := cl.events(); len(evs) != 1 || evs[0].Kind != EvData {
		t.Fatalf("events %+v", evs)
	}
	p := make([]byte, 10)
	n, end := cl.c.ReadBody(s, p)
	if string(p[:n]) != "hello" || !end {
		t.Errorf("body %q end=%v", p[:n], end)
	}
	// The response: head, body, end.
	cl.c.Headers(200)
	cl.c.Field([]byte("Content-Type"), []byte("text/plain"))
	cl.c.Field([]byte("X-Custom"), []byte("v"))
	cl.c.EndHeaders(s, false)
	cl.c.WriteData(s, []byte("world"), true)
	fs := cl.out()
	if len(fs) != 2 || fs[0].typ != http2.FrameHeaders || fs[1].typ != http2.FrameData || fs[1].flags&http2.FlagDataEndStream == 0 {
		t.Fatalf("response frames %+v", fs)
	}
	want := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"}, {Name: "x-custom", Value: "v"}}
	if len(fs[0].fields) != 3 {
		t.Fatalf("response fields %v", fs[0].fields)
	}
	for i, f := range want {
		if fs[0].fields[i].Name != f.Name || fs[0].fields[i].Value != f.Value {
			t.Errorf("field %d: %v, want %v", i, fs[0].fields[i], f)
		}
	}
	if !cl.c.Closed(s) || cl.c.Active() != 0 {
		t.Errorf("stream not closed after both ends")
	}
	cl.c.Release(s)
}

// TestLongHeadSplit: a response head larger than the client's frame size
// goes out as HEADERS and CONTINUATION frames.
func TestLongHeadSplit(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, true)
	cl.feed()
	s := cl.events()[0].S
	cl.c.Headers(404)
	for range 10 {
		cl.c.Field([]byte("x-pad"), bytes.Repeat([]byte("abcdefgh"), 400))
	}
	cl.c.EndHeaders(s, true)
	fs := cl.out()
	if len(fs) < 2 || fs[0].typ != http2.FrameHeaders || fs[0].flags&http2.FlagHeadersEndHeaders != 0 ||
		fs[len(fs)-1].typ != http2.FrameContinuation || fs[len(fs)-1].flags&http2.FlagContinuationEndHeaders == 0 {
		t.Fatalf("frames %d, first %+v", len(fs), fs[0].typ)
	}
}

func TestFlowControlStallsAndResumes(t *testing.T) {
	cl := newClient(t, Config{})
	cl.out()
	cl.buf.WriteString(Preface)
	cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	cl.get(1, true)
	cl.feed()
	cl.out()
	s := cl.events()[0].S
	cl.c.Headers(200)
	cl.c.EndHeaders(s, false)
	cl.c.WriteData(s, []byte("0123456789abcdefghijklmno"), false)
	cl.c.Trailers()
	cl.c.Field([]byte("grpc-status"), []byte("0"))
	cl.c.EndTrailers(s)
	fs := cl.out()
	if d := find(fs, http2.FrameData); d == nil || string(d.data) != "0123456789" {
		t.Fatalf("first window's data %+v", fs)
	}
	if cl.c.Pending(s) != 15 {
		t.Fatalf("pending %d", cl.c.Pending(s))
	}
	cl.fr.WriteWindowUpdate(1, 5)
	cl.feed()
	if fs := cl.out(); len(fs) != 1 || string(fs[0].data) != "abcde" {
		t.Fatalf("after 5 more: %+v", fs)
	}
	if evs := cl.events(); len(evs) != 0 {
		t.Errorf("writable too early: %+v", evs)
	}
	// A larger initial window opens the stream's too.
	cl.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	cl.feed()
	fs = cl.out()
	if len(fs) != 3 || fs[0].typ != http2.FrameSettings || string(fs[1].data) != "fghijklmno" ||
		fs[2].typ != http2.FrameHeaders || fs[2].flags&http2.FlagHeadersEndStream == 0 {
		t.Fatalf("after SETTINGS: %+v", fs)
	}
	if evs := cl.events(); len(evs) != 1 || evs[0].Kind != EvWritable {
		t.Errorf("events %+v", evs)
	}
	if !cl.c.Closed(s) {
		t.Errorf("stream open after its trailers")
	}
}

func TestConnectionWindowStall(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, true)
	cl.feed()
	s := cl.events()[0].S
	cl.c.Headers(200)
	cl.c.EndHeaders(s, false)
	cl.c.WriteData(s, make([]byte, 70000), true)
	var sent int
	for _, f := range cl.out() {
		sent += len(f.data)
		if len(f.data) > defaultFrameSize {
			t.Errorf("DATA frame of %d bytes", len(f.data))
		}
	}
	if sent != 65535 || cl.c.Pending(s) != 70000-65535 {
		t.Fatalf("sent %d pending %d", sent, cl.c.Pending(s))
	}
	cl.c.Release(s) // the end waits for window: not reset
	cl.fr.WriteWindowUpdate(0, 100000)
	cl.fr.WriteWindowUpdate(1, 100000)
	cl.feed()
	fs := cl.out()
	if len(fs) != 1 || len(fs[0].data) != 70000-65535 || fs[0].flags&http2.FlagDataEndStream == 0 {
		t.Fatalf("after WINDOW_UPDATE: %+v", fs)
	}
}

func TestRequestBodyWindows(t *testing.T) {
	cl := newClient(t, Config{StreamWindow: 1000, ConnWindow: 100000})
	cl.start()
	cl.get(1, false)
	cl.fr.WriteData(1, false, make([]byte, 600))
	cl.feed()
	s := cl.events()[0].S
	if fs := cl.out(); len(fs) != 0 {
		t.Errorf("window given back before any read: %+v", fs)
	}
	n, _ := cl.c.ReadBody(s, make([]byte, 600))
	fs := cl.out()
	if n != 600 || len(fs) != 1 || fs[0].stream != 1 || fs[0].inc != 600 {
		t.Fatalf("after reading 600: %+v", fs)
	}
	// Over the window: the stream is reset, the connection lives.
	cl.fr.WriteData(1, false, make([]byte, 1001))
	cl.feed()
	fs = cl.out()
	if r := find(fs, http2.FrameRSTStream); r == nil || r.code != http2.ErrCodeFlowControl {
		t.Fatalf("over the stream window: %+v", fs)
	}
	if evs := cl.events(); len(evs) != 1 || evs[0].Kind != EvReset || evs[0].Code != FlowControlError {
		t.Errorf("events %+v", evs)
	}
	if cl.err != nil {
		t.Errorf("connection error %v", cl.err)
	}
}

func TestResets(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, false)
	cl.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	cl.feed()
	evs := cl.events()
	if len(evs) != 2 || evs[0].Kind != EvRequest || evs[1].Kind != EvReset || evs[1].Code != Cancel {
		t.Fatalf("events %+v", evs)
	}
	s := evs[0].S
	if cl.c.EndHeaders(s, true) || cl.c.WriteData(s, []byte("x"), true) {
		t.Errorf("write on a reset stream accepted")
	}
	if len(cl.out()) != 0 {
		t.Errorf("output for a reset stream")
	}
	cl.c.Release(s)
	// RST_STREAM on an idle stream is a connection error.
	cl.fr.WriteRSTStream(9, http2.ErrCodeCancel)
	cl.feed()
	if g := find(cl.out(), http2.FrameGoAway); g == nil || g.code != http2.ErrCodeProtocol || g.lastID != 1 {
		t.Errorf("RST_STREAM on an idle stream: %+v", g)
	}
}

func TestRapidResetFlood(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	var id uint32 = 1
	for ; id < 2*300; id += 2 {
		cl.get(id, true)
		cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		if cl.feed() != nil {
			break
		}
		for _, e := range cl.events() {
			if e.Kind == EvRequest {
				cl.c.Release(e.S)
			}
		}
	}
	if !cl.c.Flooded() || cl.c.Resets() != defaultResetLimit+1 {
		t.Fatalf("flooded=%v after %d resets", cl.c.Flooded(), cl.c.Resets())
	}
	if g := find(cl.out(), http2.FrameGoAway); g == nil || g.code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %+v", g)
	}
	// A connection that resets one stream in five is suspect, not closed.
	cl = newClient(t, Config{})
	cl.start()
	for id = 1; id < 2*300; id += 2 {
		cl.get(id, true)
		if id%10 == 1 {
			cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		cl.feed()
		for _, e := range cl.events() {
			if e.Kind == EvRequest {
				cl.c.Release(e.S)
			}
		}
	}
	if cl.err != nil || cl.c.Flooded() || !cl.c.Suspect() {
		t.Errorf("err=%v flooded=%v suspect=%v", cl.err, cl.c.Flooded(), cl.c.Suspect())
	}
}

// TestProvokedResetFlood: stream errors a client provokes on streams it
// opened (MadeYouReset, CVE-2025-8671) count as its resets: the same
// rapid-reset rule ends the connection, each provocation sent after the
// stream's head was taken (the stream dispatched).
func TestProvokedResetFlood(t *testing.T) {
	for _, c := range []struct {
		name    string
		provoke func(cl *client, id uint32)
	}{
		{"WINDOW_UPDATE of 0", func(cl *client, id uint32) { cl.fr.WriteWindowUpdate(id, 0) }},
		{"DATA after END_STREAM", func(cl *client, id uint32) { cl.fr.WriteData(id, false, []byte("x")) }},
		{"PRIORITY on itself", func(cl *client, id uint32) {
			cl.fr.WritePriority(id, http2.PriorityParam{StreamDep: id})
		}},
		{"window overflow", func(cl *client, id uint32) { cl.fr.WriteWindowUpdate(id, 1<<31-1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.fr.AllowIllegalWrites = true
			cl.start()
			for id := uint32(1); id < 2*300 && cl.err == nil; id += 2 {
				cl.get(id, true)
				cl.feed()
				held := cl.events()
				c.provoke(cl, id)
				cl.feed()
				cl.events()
				for _, e := range held {
					if e.Kind == EvRequest {
						cl.c.Release(e.S)
					}
				}
			}
			if !cl.c.Flooded() || cl.c.Resets() != defaultResetLimit+1 {
				t.Fatalf("flooded=%v after %d resets", cl.c.Flooded(), cl.c.Resets())
			}
			if g := find(cl.out(), http2.FrameGoAway); g == nil || g.code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %+v", g)
			}
		})
	}
}

// TestResetFloodPaddedWithBadHeads: streams that never reach the
// consumer (a malformed head, refused) do not count as opened, so they
// cannot buy a client resets: three bad heads per dispatched stream
// reset still end the connection.
func TestResetFloodPaddedWithBadHeads(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	id := uint32(1)
	for round := 0; round < 300 && cl.err == nil; round++ {
		for range 3 {
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndStream: true, EndHeaders: true,
				BlockFragment: cl.block(":method", "GET", ":scheme", "https", ":path", "/", "X-Up", "1")})
			id += 2
		}
		cl.get(id, true)
		cl.feed()
		held := cl.events()
		cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		id += 2
		cl.feed()
		cl.events()
		for _, e := range held {
			if e.Kind == EvRequest {
				cl.c.Release(e.S)
			}
		}
	}
	if !cl.c.Flooded() || cl.c.Resets() != defaultResetLimit+1 {
		t.Fatalf("flooded=%v after %d resets of %d streams", cl.c.Flooded(), cl.c.Resets(), cl.c.Streams())
	}
}

func TestGracefulGoAway(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, true)
	cl.get(3, true)
	cl.feed()
	evs := cl.events()
	cl.c.GoAway()
	if g := find(cl.out(), http2.FrameGoAway); g == nil || g.code != http2.ErrCodeNo || g.lastID != 3 {
		t.Fatalf("GOAWAY %+v", g)
	}
	cl.get(5, true)
	cl.feed()
	if e := cl.events(); len(e) != 0 {
		t.Errorf("a stream opened after GOAWAY: %+v", e)
	}
	for _, e := range evs {
		cl.c.Headers(204)
		cl.c.EndHeaders(e.S, true)
		cl.c.Release(e.S)
	}
	if cl.c.Active() != 0 || cl.err != nil {
		t.Errorf("active %d err %v", cl.c.Active(), cl.err)
	}
}

// TestGoAwayLastIDNeverGrows: a GOAWAY after a graceful one (a
// connection error once the drain began) announces no stream the first
// did not: the client opened more streams meanwhile, which were dropped,
// and a higher last-stream-id would tell it they were processed (RFC
// 9113 §6.8: an endpoint MUST NOT increase it).
func TestGoAwayLastIDNeverGrows(t *testing.T) {
	for _, c := range []struct {
		name  string
		after func(cl *client)
	}{
		{"PING on a stream", func(cl *client) { cl.fr.WriteRawFrame(http2.FramePing, 0, 1, make([]byte, 8)) }},
		{"rapid reset", func(cl *client) {
			for id := uint32(9); id < 9+2*(defaultResetLimit+2); id += 2 {
				cl.get(id, true)
				cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.start()
			cl.get(1, true)
			cl.get(3, true)
			cl.feed()
			cl.events()
			cl.c.GoAway()
			cl.get(5, true)
			cl.get(7, true)
			c.after(cl)
			cl.feed()
			var ids []uint32
			for _, f := range cl.out() {
				if f.typ == http2.FrameGoAway {
					ids = append(ids, f.lastID)
				}
			}
			if len(ids) != 2 || ids[0] != 3 || ids[1] > ids[0] || cl.err == nil {
				t.Errorf("GOAWAY last-stream-ids %v (err %v), want 3 then at most 3", ids, cl.err)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	t.Run("concurrent streams", func(t *testing.T) {
		cl := newClient(t, Config{MaxConcurrentStreams: 3})
		cl.start()
		for id := uint32(1); id <= 7; id += 2 {
			cl.get(id, true)
		}
		cl.feed()
		if n := len(cl.events()); n != 3 {
			t.Errorf("%d streams started, want 3", n)
		}
		if r := find(cl.out(), http2.FrameRSTStream); r == nil || r.stream != 7 || r.code != http2.ErrCodeRefusedStream {
			t.Errorf("4th stream: %+v", r)
		}
		// The refused stream's block was decoded: the table is intact.
		cl.get(9, true, "x-after", "1")
		cl.feed()
		if cl.err != nil {
			t.Fatal(cl.err)
		}
	})
	t.Run("header list size", func(t *testing.T) {
		cl := newClient(t, Config{MaxHeaderListSize: 200})
		cl.start()
		cl.get(1, true, "x-big", strings.Repeat("b", 150))
		cl.feed()
		if n := len(cl.events()); n != 0 {
			t.Errorf("oversized head surfaced")
		}
		h := find(cl.out(), http2.FrameHeaders)
		if h == nil || len(h.fields) != 1 || h.fields[0].Value != "431" || h.flags&http2.FlagHeadersEndStream == 0 {
			t.Fatalf("answer %+v", h)
		}
	})
	t.Run("continuation flood", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.start()
		b := cl.block(":method", "GET")
		cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b})
		for range maxContinuations + 1 {
			cl.fr.WriteContinuation(1, false, nil)
		}
		var ce ConnError
		if err := cl.feed(); !errors.As(err, &ce) || ce.Code != EnhanceYourCalm {
			t.Errorf("error %v", err)
		}
	})
	t.Run("frame size", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.start()
		cl.get(1, false)
		cl.fr.WriteData(1, false, make([]byte, defaultFrameSize+1))
		var ce ConnError
		if err := cl.feed(); !errors.As(err, &ce) || ce.Code != FrameSizeError {
			t.Errorf("error %v", err)
		}
	})
}

func TestMalformedRequests(t *testing.T) {
	for _, c := range []struct {
		name   string
		fields []string
	}{
		{"upper-case name", []string{":method", "GET", ":scheme", "https", ":path", "/", "X-Up", "1"}},
		{"connection header", []string{":method", "GET", ":scheme", "https", ":path", "/", "connection", "close"}},
		{"te not trailers", []string{":method", "GET", ":scheme", "https", ":path", "/", "te", "gzip"}},
		{"no path", []string{":method", "GET", ":scheme", "https"}},
		{"empty path", []string{":method", "GET", ":scheme", "https", ":path", ""}},
		{"pseudo after regular", []string{":method", "GET", ":scheme", "https", "a", "b", ":path", "/"}},
		{"unknown pseudo", []string{":method", "GET", ":scheme", "https", ":path", "/", ":status", "200"}},
		{"repeated pseudo", []string{":method", "GET", ":method", "GET", ":scheme", "https", ":path", "/"}},
		{"content-length with END_STREAM", []string{":method", "POST", ":scheme", "https", ":path", "/", "content-length", "3"}},
		// The head is forwarded as an HTTP/1.1 request line.
		{"method not a token", []string{":method", "GET /x", ":scheme", "https", ":path", "/"}},
		{"absolute-form path", []string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "http://b.test/x"}},
		{"path not origin-form", []string{":method", "GET", ":scheme", "https", ":path", "x"}},
		{"space in path", []string{":method", "GET", ":scheme", "https", ":path", "/a HTTP/1.1"}},
		{"control in path", []string{":method", "GET", ":scheme", "https", ":path", "/a\x01"}},
		{"asterisk not OPTIONS", []string{":method", "GET", ":scheme", "https", ":path", "*"}},
		{"control in value", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", "v\x01v"}},
		{"signed content-length", []string{":method", "GET", ":scheme", "https", ":path", "/", "content-length", "+0"}},
		{"negative zero content-length", []string{":method", "GET", ":scheme", "https", ":path", "/", "content-length", "-0"}},
		{"DEL in value", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", "v\x7f"}},
		// RFC 9113 §8.2.1: no leading or trailing SP or HTAB.
		{"leading space in value", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", " v"}},
		{"trailing space in value", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", "v "}},
		{"leading tab in value", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", "\tv"}},
		{"trailing tab in value", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", "v\t"}},
		{"value all space", []string{":method", "GET", ":scheme", "https", ":path", "/", "x-a", " "}},
		{"spaced authority", []string{":method", "GET", ":scheme", "https", ":authority", "a.test ", ":path", "/"}},
		{"spaced scheme", []string{":method", "GET", ":scheme", " https", ":path", "/"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.start()
			cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block(c.fields...), EndStream: true, EndHeaders: true})
			cl.feed()
			if e := cl.events(); len(e) != 0 {
				t.Errorf("surfaced: %+v", e)
			}
			if r := find(cl.out(), http2.FrameRSTStream); r == nil || r.code != http2.ErrCodeProtocol {
				t.Errorf("answer %+v", r)
			}
			if cl.err != nil || cl.c.Active() != 0 {
				t.Errorf("err %v active %d", cl.err, cl.c.Active())
			}
		})
	}
	t.Run("spaced trailer", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.start()
		cl.get(1, false)
		cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block("x-t", "v "), EndStream: true, EndHeaders: true})
		cl.feed()
		if r := find(cl.out(), http2.FrameRSTStream); r == nil || r.code != http2.ErrCodeProtocol {
			t.Errorf("answer %+v", r)
		}
	})
	t.Run("content-length mismatch", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.start()
		cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
			BlockFragment: cl.block(":method", "POST", ":scheme", "https", ":path", "/", "content-length", "3")})
		cl.fr.WriteData(1, true, []byte("ab"))
		cl.feed()
		if r := find(cl.out(), http2.FrameRSTStream); r == nil || r.code != http2.ErrCodeProtocol {
			t.Errorf("answer %+v", r)
		}
	})
	t.Run("asterisk with OPTIONS, HTAB in a value", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.start()
		cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true,
			BlockFragment: cl.block(":method", "OPTIONS", ":scheme", "https", ":path", "*", ":authority", "a.test", "x-a", "v\tw")})
		cl.feed()
		e := cl.events()
		if len(e) != 1 || e[0].Kind != EvRequest || string(e[0].S.Path()) != "*" || fieldsOf(e[0].S)["x-a"] != "v\tw" {
			t.Errorf("events %+v", e)
		}
	})
	t.Run("host stands in for authority", func(t *testing.T) {
		cl := newClient(t, Config{})
		cl.start()
		cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true,
			BlockFragment: cl.block(":method", "GET", ":scheme", "https", ":path", "/", "host", "h.test")})
		cl.feed()
		e := cl.events()
		if len(e) != 1 || string(e[0].S.Authority()) != "h.test" {
			t.Errorf("events %+v", e)
		}
	})
}

func TestStreamStates(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, true)
	cl.feed()
	s := cl.events()[0].S
	// DATA on a half-closed (remote) stream: stream error STREAM_CLOSED.
	cl.fr.WriteData(1, false, []byte("x"))
	cl.feed()
	if r := find(cl.out(), http2.FrameRSTStream); r == nil || r.code != http2.ErrCodeStreamClosed {
		t.Errorf("DATA after END_STREAM: %+v", r)
	}
	if e := cl.events(); len(e) != 1 || e[0].Kind != EvReset {
		t.Errorf("events %+v", e)
	}
	cl.c.Release(s)
	// HEADERS on a closed stream: connection error STREAM_CLOSED.
	cl.get(1, true)
	var ce ConnError
	if err := cl.feed(); !errors.As(err, &ce) || ce.Code != StreamClosed {
		t.Errorf("HEADERS on a closed stream: %v", err)
	}
	// Even stream IDs and DATA on idle streams are connection errors.
	for _, f := range []func(*client){
		func(cl *client) { cl.get(2, true) },
		func(cl *client) { cl.fr.WriteData(5, true, nil) },
		func(cl *client) { cl.fr.WriteWindowUpdate(5, 1) },
	} {
		cl := newClient(t, Config{})
		cl.start()
		f(cl)
		if err := cl.feed(); !errors.As(err, &ce) || ce.Code != ProtocolError {
			t.Errorf("error %v", err)
		}
	}
}

func TestTrailersEndTheBody(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, false)
	cl.fr.WriteData(1, false, []byte("abc"))
	cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: cl.block("x-trailer", "1"), EndStream: true, EndHeaders: true})
	cl.feed()
	evs := cl.events()
	if len(evs) != 2 || evs[1].Kind != EvData {
		t.Fatalf("events %+v", evs)
	}
	n, end := cl.c.ReadBody(evs[0].S, make([]byte, 10))
	if n != 3 || !end {
		t.Errorf("read %d end %v", n, end)
	}
}

// TestHeadAllocations: a GET's head decoded and its response written
// allocate nothing per request once the connection is warm (pooled
// streams, the per-stream arena), beyond what hpack's decoder makes.
func TestHeadAllocations(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	id := uint32(1)
	var wire []byte
	evs := make([]Event, 0, 4)
	out := make([]byte, 0, 4096)
	run := func() {
		if err := cl.c.Feed(wire); err != nil {
			t.Fatal(err)
		}
		evs = cl.c.TakeEvents(evs[:0])
		s := evs[0].S
		cl.c.Headers(200)
		cl.c.Field([]byte("Content-Type"), []byte("text/plain"))
		cl.c.EndHeaders(s, false)
		cl.c.WriteData(s, []byte("hello"), true)
		cl.c.Release(s)
		out = cl.c.TakeOutput(out)
		// The next request: the same block with the next stream ID (the
		// encoder's table makes it all indexed fields).
		id += 2
		wire[5], wire[6], wire[7], wire[8] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	}
	cl.get(id, true) // fills the client's table: the next blocks are indexed
	wire = append(wire[:0], cl.buf.Bytes()...)
	cl.buf.Reset()
	run()
	cl.get(id, true)
	wire = append(wire[:0], cl.buf.Bytes()...)
	cl.buf.Reset()
	run()
	if a := testing.AllocsPerRun(100, run); a > 0 {
		t.Errorf("%.1f allocations per request", a)
	}
}

// cancelling opens a stream and resets it once the consumer has it (a
// typeahead search cancelling the last query), advancing the client's
// clock by gap first. It reports whether the connection still stands.
func (cl *client) cancelling(id uint32, gap time.Duration) bool {
	cl.clock = cl.clock.Add(gap)
	cl.get(id, true)
	if cl.feed() != nil {
		return false
	}
	held := cl.events()
	cl.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	err := cl.feed()
	cl.events()
	for _, e := range held {
		if e.Kind == EvRequest {
			cl.c.Release(e.S)
		}
	}
	cl.out()
	return err == nil
}

// TestResetRate: the rapid-reset rule counts a rate, not a lifetime. A
// connection cancelling at a steady rate under ResetLimit per ResetWindow
// (100 per 10 s) for an hour of the manual clock is never cut, while a
// rate above it is, and so is a burst of more than ResetLimit resets at
// the end of the long quiet hour.
func TestResetRate(t *testing.T) {
	for _, c := range []struct {
		name    string
		gap     time.Duration // between cancellations
		span    time.Duration
		wantCut bool
	}{
		{"typeahead, 5 a second for an hour", 200 * time.Millisecond, time.Hour, false},
		{"9 a second for ten minutes", time.Second / 9, 10 * time.Minute, false},
		{"11 a second", time.Second / 11, 10 * time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, Config{})
			cl.start()
			n := int(c.span / c.gap)
			id := uint32(1)
			i := 0
			for ; i < n && cl.cancelling(id, c.gap); i++ {
				id += 2
			}
			if cut := i < n; cut != c.wantCut || cut != cl.c.Flooded() {
				t.Fatalf("cut after %d of %d cancellations (flooded %v), want cut %v", i, n, cl.c.Flooded(), c.wantCut)
			}
			if c.wantCut {
				return
			}
			// A burst, at the end of the hour, is cut within ResetLimit+1
			// resets.
			for k := 0; k <= defaultResetLimit; k++ {
				id += 2
				if !cl.cancelling(id, 0) {
					if !cl.c.Flooded() {
						t.Fatalf("burst: ended by %v, not flooded", cl.err)
					}
					return
				}
			}
			t.Fatalf("a burst of %d resets after the steady hour was not cut", defaultResetLimit+1)
		})
	}
}

// TestSuspicionFades: a connection that reset many of its streams is
// suspect (new streams wait before dispatch), and stops being so once it
// has behaved for a while.
func TestSuspicionFades(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	id := uint32(1)
	for range 50 {
		cl.cancelling(id, 0)
		id += 2
	}
	if !cl.c.Suspect() || cl.c.Flooded() {
		t.Fatalf("after 50 resets: suspect %v flooded %v", cl.c.Suspect(), cl.c.Flooded())
	}
	for range 10 {
		cl.clock = cl.clock.Add(10 * time.Second)
		cl.get(id, true)
		cl.feed()
		for _, e := range cl.events() {
			cl.c.Release(e.S)
		}
		id += 2
	}
	if cl.c.Suspect() {
		t.Errorf("still suspect after 100 s without a reset")
	}
}

// TestShedBuffers: ShedBuffers keeps a partial frame and output not yet
// taken, gives the buffers back once they are empty, and the connection
// reads and writes on as before.
func TestShedBuffers(t *testing.T) {
	cl := newClient(t, Config{})
	cl.start()
	cl.get(1, false)
	cl.fr.WriteData(1, true, bytes.Repeat([]byte("d"), 4000))
	b := append([]byte(nil), cl.buf.Bytes()...)
	cl.buf.Reset()
	cut := len(b) - 1000 // inside the DATA frame
	if err := cl.c.Feed(b[:cut]); err != nil {
		t.Fatal(err)
	}
	cl.c.ShedBuffers() // the partial frame and the output (a WINDOW_UPDATE, if any) stay
	if len(cl.c.in) == 0 {
		t.Fatal("the partial frame was dropped")
	}
	if err := cl.c.Feed(b[cut:]); err != nil {
		t.Fatal(err)
	}
	var s *Stream
	for _, e := range cl.events() {
		if e.Kind == EvRequest {
			s = e.S
		}
	}
	if s == nil {
		t.Fatal("no request")
	}
	body := make([]byte, 8000)
	if n, end := cl.c.ReadBody(s, body); n != 4000 || !end {
		t.Fatalf("body %d bytes (end %v), want 4000 and its end", n, end)
	}
	cl.out()
	cl.c.ShedBuffers()
	if cl.c.in != nil || cl.c.out != nil {
		t.Fatalf("idle, still holding in %d, out %d bytes of capacity", cap(cl.c.in), cap(cl.c.out))
	}
	cl.c.Headers(200)
	cl.c.EndHeaders(s, true)
	if fs := cl.out(); len(fs) != 1 || fs[0].typ != http2.FrameHeaders || fs[0].stream != 1 {
		t.Fatalf("after shedding, output %+v", fs)
	}
}
