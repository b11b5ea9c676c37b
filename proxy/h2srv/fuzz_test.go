package h2srv

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzFeed feeds arbitrary bytes after the preface and SETTINGS, in
// chunks, answering and releasing every request: the core must not panic,
// must keep its stream count within the limit, and its output and kept
// state must stay bounded by what came in.
func FuzzFeed(f *testing.F) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", "/"}, {":authority", "a"}, {"content-length", "3"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(1, true, []byte("abc"))
	fr.WriteWindowUpdate(0, 100)
	fr.WritePing(false, [8]byte{})
	fr.WriteRSTStream(1, http2.ErrCodeCancel)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	fr.WriteGoAway(1, http2.ErrCodeNo, nil)
	fr.WritePriority(3, http2.PriorityParam{StreamDep: 1})
	f.Add(byte(7), b.Bytes())
	f.Add(byte(0), []byte{0, 0, 4, 1, 4, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41})
	f.Fuzz(func(t *testing.T, chunk byte, in []byte) {
		c := NewConn(Config{MaxConcurrentStreams: 8, MaxHeaderListSize: 4096, StreamWindow: 1 << 12, ConnWindow: 1 << 16})
		pre := append([]byte(Preface), 0, 0, 0, 4, 0, 0, 0, 0, 0)
		if err := c.Feed(pre); err != nil {
			t.Fatal(err)
		}
		c.TakeOutput(nil)
		step := int(chunk)%64 + 1
		var evs []Event
		buf := make([]byte, 100)
		for len(in) > 0 {
			n := min(step, len(in))
			err := c.Feed(in[:n])
			in = in[n:]
			evs = c.TakeEvents(evs[:0])
			for _, e := range evs {
				switch e.Kind {
				case EvRequest:
					c.ReadBody(e.S, buf)
					c.Headers(200)
					c.Field([]byte("X-A"), e.S.Path())
					c.EndHeaders(e.S, false)
					c.WriteData(e.S, bytes.Repeat([]byte("d"), 5000), true)
					c.Release(e.S)
				case EvData:
					if e.S.held {
						c.ReadBody(e.S, buf)
					}
				}
			}
			if c.Active() > 8 {
				t.Fatalf("%d streams active", c.Active())
			}
			// Output per input byte is bounded (the largest answer here
			// is a response of ~5 KiB to a HEADERS frame of 9+ bytes).
			if len(c.Output()) > 64<<10+n*1024 {
				t.Fatalf("%d bytes of output for %d of input", len(c.Output()), n)
			}
			c.TakeOutput(nil)
			if len(c.in) > defaultFrameSize+frameHeaderLen {
				t.Fatalf("partial frame buffer %d", len(c.in))
			}
			if err != nil {
				return
			}
		}
	})
}
