//go:build linux

package proxy

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// h2edges_test.go: protocol edges of HTTP/2 as independent clients meet
// them (nghttp2's strict HPACK decoder, h2spec), run on every h2 front
// end: over TLS on the loops and on the goroutine driver (the portable
// engine), and h2c.

// h2Fronts names the h2 front ends.
var h2Fronts = []string{"tls-loop", "tls-portable", "h2c"}

// startH2Front starts a proxy for backend be serving h2 the front's way.
func startH2Front(t *testing.T, front, be string) *harness {
	t.Helper()
	switch front {
	case "tls-loop":
		h, _ := h2LoopProxy(t, be, nil)
		return h
	case "tls-portable":
		cf, kf := writeTestCert(t)
		return startEngine(t, policy.EnginePortable, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
			a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		})
	case "h2c":
		return startProxyOpts(t, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) { a.H2C = true })
	}
	t.Fatalf("unknown front %q", front)
	return nil
}

// dialH2Front opens a connection to the front and sends the preface and
// settings.
func dialH2Front(t *testing.T, front, addr string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	if front == "h2c" {
		return h2cRaw(t, addr, settings...)
	}
	return h2TLSRaw(t, addr, settings...)
}

// TestH2TableSizeUpdateEveryFront: a client that sets
// SETTINGS_HEADER_TABLE_SIZE to 0 (h2load --header-table-size=0) or 1024
// is sent a Dynamic Table Size Update at the start of the first response
// head (RFC 7541 §4.2; nghttp2 refuses the head without it), on every
// front end, and every response decodes under the lowered size.
func TestH2TableSizeUpdateEveryFront(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, front := range h2Fronts {
		t.Run(front, func(t *testing.T) {
			h := startH2Front(t, front, be)
			for _, size := range []uint32{0, 1024} {
				_, fr := dialH2Front(t, front, h.addr, http2.Setting{ID: http2.SettingHeaderTableSize, Val: size})
				dec := hpack.NewDecoder(4096, nil)
				acked, first := false, true
				for id := uint32(1); id <= 5; id += 2 {
					writeHead(t, fr, id, true, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/")
					status := ""
					for ended := false; !ended; {
						f, err := fr.ReadFrame()
						if err != nil {
							t.Fatalf("table size %d, stream %d: %v", size, id, err)
						}
						switch f := f.(type) {
						case *http2.SettingsFrame:
							if f.IsAck() && !acked {
								acked = true
								dec.SetAllowedMaxDynamicTableSize(size)
							}
						case *http2.HeadersFrame:
							b := f.HeaderBlockFragment()
							if !acked {
								t.Fatalf("table size %d: a head before the SETTINGS ack", size)
							}
							if u := tableUpdates(b); first && (len(u) == 0 || u[0] > uint64(size)) {
								t.Errorf("table size %d: first head starts with updates %v, want one to at most %d", size, u, size)
							}
							first = false
							hf, err := dec.DecodeFull(b)
							if err != nil {
								t.Fatalf("table size %d, stream %d: %v", size, id, err)
							}
							status = hf[0].Value
							ended = f.StreamEnded()
						case *http2.DataFrame:
							ended = f.StreamEnded()
						case *http2.RSTStreamFrame, *http2.GoAwayFrame:
							t.Fatalf("table size %d, stream %d: %v", size, id, f)
						}
					}
					if status != "200" {
						t.Errorf("table size %d, stream %d: status %q", size, id, status)
					}
				}
			}
		})
	}
}

// tableUpdates returns the Dynamic Table Size Updates a header block
// starts with (RFC 7541 §6.3).
func tableUpdates(b []byte) []uint64 {
	var out []uint64
	for len(b) > 0 && b[0]&0xe0 == 0x20 {
		v, i := uint64(b[0]&0x1f), 1
		if v == 0x1f {
			for m := uint(0); ; m += 7 {
				if i >= len(b) || m > 28 {
					return append(out, 1<<63) // malformed: larger than any setting
				}
				v += uint64(b[i]&0x7f) << m
				i++
				if b[i-1]&0x80 == 0 {
					break
				}
			}
		}
		out = append(out, v)
		b = b[i:]
	}
	return out
}

// h2Try sends one request (fields: name, value pairs) on stream id and
// says how it was answered: "status N", "rst CODE" or "goaway CODE". dec
// is the connection's decoder (the server may index response fields).
func h2Try(t *testing.T, fr *http2.Framer, dec *hpack.Decoder, id uint32, fields ...string) string {
	t.Helper()
	writeHead(t, fr, id, true, fields...)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "error " + err.Error()
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			if f.StreamID == id && len(hf) > 0 {
				return "status " + hf[0].Value
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "rst " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "goaway " + f.ErrCode.String()
		}
	}
}

// TestH2SpacedValuesEveryFront: a field value with leading or trailing
// SP or HTAB makes the request malformed (RFC 9113 §8.2.1): every front
// end -- the loops' streams, the goroutine driver, h2c -- resets the
// stream with PROTOCOL_ERROR (§8.1.1). None reaches the backend; the
// connection goes on serving, and whitespace inside a value is fine.
func TestH2SpacedValuesEveryFront(t *testing.T) {
	var hits atomic.Int64
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok "+r.Header.Get("X-A"))
	})
	for _, front := range h2Fronts {
		t.Run(front, func(t *testing.T) {
			h := startH2Front(t, front, be)
			_, fr := dialH2Front(t, front, h.addr)
			dec := hpack.NewDecoder(4096, nil)
			const want = "rst PROTOCOL_ERROR"
			before := hits.Load()
			id := uint32(1)
			for _, v := range []string{" v", "v ", "\tv", "v\t", " ", "\t"} {
				for _, name := range []string{"x-a", "user-agent"} {
					if got := h2Try(t, fr, dec, id, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/",
						name, v); got != want {
						t.Errorf("%s %q: %s, want %s", name, v, got, want)
					}
					id += 2
				}
			}
			if n := hits.Load() - before; n != 0 {
				t.Errorf("%d malformed requests reached the backend", n)
			}
			for _, v := range []string{"v w", "v\tw", ""} {
				if got := h2Try(t, fr, dec, id, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/",
					"x-a", v); got != "status 200" {
					t.Errorf("x-a %q: %s, want status 200", v, got)
				}
				id += 2
			}
		})
	}
}
