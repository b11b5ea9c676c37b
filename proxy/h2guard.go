package proxy

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// HTTP/2 rapid reset (CVE-2023-44487) and its paced variant. What follows
// is the guard of x/net's server (SENTRY_H2_SERVER=xnet); the own server
// (proxy/h2srv) applies the same rule, counts and metric in its core, and
// its driver the same suspect delay (h2own.go).
//
// x/net's server (v0.33) runs at most MaxConcurrentStreams handlers per
// connection and sends GOAWAY ENHANCE_YOUR_CALM when more than four times
// as many streams wait to start; it does nothing about resets that come at
// a pace under that, and a stream reset after its handler started still
// reaches the backend unless the handler notices. sentry adds:
//
//   - the handler does not run for a stream already reset, and serve checks
//     the stream's context again just before dispatch;
//
//   - h2Guard counts, on each connection, the streams the client opens
//     (HEADERS for a new stream ID) and the ones it resets (RST_STREAM),
//     by reading the frame headers as they pass to x/net, with the own
//     server's rule (h2srv.ResetMeter): counts that decay with time
//     constant h2ResetWindow. Once resets pass h2ResetLimit and are more
//     than a quarter of the streams opened (both counted so), it stops
//     passing the client's frames on, sends GOAWAY with ENHANCE_YOUR_CALM
//     (at a frame boundary of x/net's output, which it follows the same
//     way) and closes the connection h2GoawayLinger later. A flood, or
//     resets paced faster than h2ResetLimit per h2ResetWindow, is cut; a
//     long-lived connection that cancels at a steady modest rate (a
//     typeahead search) is not.
//
//   - A stream's handler starts as x/net reads its HEADERS, before it has
//     read the RST_STREAM that may follow in the same packet, so checking
//     the context alone lets most back-to-back resets through. On a
//     connection where more than one stream in eight has been reset
//     (suspect), a new stream waits h2SuspectDelay before dispatch and is
//     dropped if reset meanwhile; a connection that resets nothing, or
//     rarely, pays nothing.
//
// The count is sentry_client_errors_total{reason="h2_reset_flood"}.
const (
	h2ResetLimit   = 100
	h2ResetWindow  = 10 * time.Second
	h2GoawayLinger = 250 * time.Millisecond
	h2MaxStreams   = 128 // concurrent streams per connection, as nginx
	h2SuspectDelay = 10 * time.Millisecond
)

// h2GuardKey is the context key under which each stream finds its
// connection's guard.
type h2GuardKey struct{}

// suspect reports whether the connection resets streams often enough that
// new ones wait before dispatch.
func (g *h2Guard) suspect() bool { return g.susp.Load() }

var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// frameTracker follows frame boundaries in a byte stream of HTTP/2
// frames.
type frameTracker struct {
	hdr  [9]byte
	n    int // header bytes collected
	left int // payload bytes of the current frame still to pass
}

// boundary reports whether the stream is between frames.
func (f *frameTracker) boundary() bool { return f.n == 0 && f.left == 0 }

// feed consumes b and calls onHeader for each complete frame header, with
// the offset just past it; onHeader returning false stops the scan there
// (feed then returns that offset). Otherwise feed returns len(b).
func (f *frameTracker) feed(b []byte, onHeader func(h *[9]byte, off int) bool) int {
	i := 0
	for i < len(b) {
		if f.left > 0 {
			k := min(f.left, len(b)-i)
			f.left -= k
			i += k
			continue
		}
		k := copy(f.hdr[f.n:], b[i:])
		f.n += k
		i += k
		if f.n < 9 {
			break
		}
		f.n = 0
		f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
		if onHeader != nil && !onHeader(&f.hdr, i) {
			return i
		}
	}
	return i
}

// toBoundary returns the length of b's prefix that ends the frame in
// progress (len(b) if b ends within it), without consuming it.
func (f frameTracker) toBoundary(b []byte) int {
	i := 0
	for i < len(b) {
		if f.left > 0 {
			k := min(f.left, len(b)-i)
			f.left -= k
			i += k
			if f.left == 0 {
				return i
			}
			continue
		}
		k := copy(f.hdr[f.n:], b[i:])
		f.n += k
		i += k
		if f.n < 9 {
			return i
		}
		f.n = 0
		f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
		if f.left == 0 {
			return i
		}
	}
	return i
}

// h2Guard wraps an h2 connection for x/net (see above).
type h2Guard struct {
	net.Conn           // what x/net's output goes through (h2Out)
	tc       *tls.Conn // the TLS connection under it
	fe       *frontend

	// read side: x/net's reader goroutine only
	preface int // preface bytes still to pass
	in      frameTracker
	maxID   uint32
	meter   h2srv.ResetMeter // streams opened and reset, decaying
	now     func() time.Time // the meter's clock
	susp    atomic.Bool      // meter.Suspect, for the handlers (suspect)

	tripped atomic.Bool
	lastID  atomic.Uint32 // last stream ID passed to x/net, for GOAWAY

	wmu     sync.Mutex
	out     frameTracker
	onOut   func(h *[9]byte, off int) bool // outFrame, bound once
	xnetGA  bool                           // x/net wrote a GOAWAY of its own
	pending bool                           // GOAWAY to send at the next output frame boundary
	sent    bool                           // GOAWAY sent: x/net's further output is dropped
	closeAt sync.Once
}

func newH2Guard(c net.Conn, tc *tls.Conn, fe *frontend) *h2Guard {
	g := &h2Guard{Conn: c, tc: tc, fe: fe, preface: len(h2Preface), now: time.Now,
		meter: h2srv.ResetMeter{Limit: h2ResetLimit, Window: h2ResetWindow}}
	g.onOut = g.outFrame
	return g
}

// outFrame notes a GOAWAY among x/net's output frames (under wmu).
func (g *h2Guard) outFrame(h *[9]byte, _ int) bool {
	if h[3] == 0x7 {
		g.xnetGA = true
	}
	return true
}

func (g *h2Guard) Read(b []byte) (int, error) {
	if g.tripped.Load() {
		return g.discard(b)
	}
	n, err := g.Conn.Read(b)
	if n <= 0 {
		return n, err
	}
	p := b[:n]
	skip := 0
	if g.preface > 0 {
		skip = min(g.preface, n)
		g.preface -= skip
	}
	used := skip + g.in.feed(p[skip:], g.onFrame)
	if g.tripped.Load() {
		g.goAway()
		return used, nil
	}
	return n, err
}

// onFrame counts one incoming frame header; false trips the guard.
func (g *h2Guard) onFrame(h *[9]byte, _ int) bool {
	id := binary.BigEndian.Uint32(h[5:9]) & 0x7fffffff
	switch h[3] {
	case 0x1: // HEADERS
		if id > g.maxID {
			g.maxID = id
			g.meter.Stream(g.now())
			g.lastID.Store(id)
			g.susp.Store(g.meter.Suspect())
		}
	case 0x3: // RST_STREAM
		flood := g.meter.Reset(g.now())
		g.susp.Store(g.meter.Suspect())
		if flood {
			g.tripped.Store(true)
			return false
		}
	}
	return true
}

// discard reads and drops what the client still sends, so the close that
// follows the GOAWAY is a FIN and the client reads the GOAWAY.
func (g *h2Guard) discard(b []byte) (int, error) {
	for {
		if _, err := g.Conn.Read(b); err != nil {
			return 0, err
		}
	}
}

// goAway sends GOAWAY(ENHANCE_YOUR_CALM) once x/net's output is at a frame
// boundary, and closes the connection h2GoawayLinger later.
func (g *h2Guard) goAway() {
	// The close comes in any case, GOAWAY sent or not (x/net may be in
	// the middle of a frame it never finishes).
	g.closeAt.Do(func() {
		g.fe.p.metrics.clientErrors.WithLabelValues(g.fe.addr, "h2_reset_flood").Inc()
		time.AfterFunc(h2GoawayLinger, func() { _ = g.Conn.Close() })
	})
	g.wmu.Lock()
	if !g.sent {
		g.pending = true
		if g.out.boundary() {
			g.writeGoAwayLocked()
		}
	}
	g.wmu.Unlock()
}

// writeGoAwayLocked writes GOAWAY(ENHANCE_YOUR_CALM) with the last stream
// ID passed to x/net -- unless x/net sent a GOAWAY already (a graceful
// shutdown): streams opened since were ignored by x/net, and a second
// GOAWAY must not announce more than the first (RFC 9113 §6.8). The
// close follows either way.
func (g *h2Guard) writeGoAwayLocked() {
	if g.xnetGA {
		g.sent, g.pending = true, false
		return
	}
	var f [17]byte
	f[2] = 8   // length
	f[3] = 0x7 // GOAWAY
	binary.BigEndian.PutUint32(f[9:13], g.lastID.Load())
	binary.BigEndian.PutUint32(f[13:17], 0xb) // ENHANCE_YOUR_CALM
	_, _ = g.Conn.Write(f[:])
	g.sent, g.pending = true, false
}

func (g *h2Guard) Write(b []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.sent {
		return len(b), nil
	}
	if !g.pending {
		n, err := g.Conn.Write(b)
		g.out.feed(b[:n], g.onOut)
		return n, err
	}
	// Finish the frame in progress, then GOAWAY; the rest is dropped.
	k := 0
	if !g.out.boundary() {
		k = g.out.toBoundary(b)
		g.out.feed(b[:k], g.onOut)
	}
	if _, err := g.Conn.Write(b[:k]); err != nil {
		return 0, err
	}
	if g.out.boundary() {
		g.writeGoAwayLocked()
	}
	return len(b), nil
}

// h2GuardTLS is the guard of a TLS connection, as x/net is given it: with
// the TLS methods. An h2c connection's guard is given bare (x/net takes a
// connection with ConnectionState for a TLS one).
type h2GuardTLS struct{ *h2Guard }

// NetConn lets code that looks for the socket under a TLS conn find it.
func (g h2GuardTLS) NetConn() net.Conn { return g.tc.NetConn() }

// ConnectionState lets x/net check the TLS version and cipher suite and
// fill each request's TLS field.
func (g h2GuardTLS) ConnectionState() tls.ConnectionState { return g.tc.ConnectionState() }
