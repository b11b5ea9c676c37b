//go:build linux

package evloop

import "github.com/sentry-proxy/sentry/proxy/exchange"

// mem_linux.go: what a connection holds, and when. A connection takes a
// read buffer when bytes arrive (getBuf), an exchange and an output
// buffer when a request starts (getEx, getOut), a TLS connection a
// record buffer when it reads (readRecords) and one for its sealed bytes
// when it writes (flushTLS); when its exchange is done and nothing is
// buffered, it gives them all back (putEx, idleBufs), as nginx frees a
// keep-alive connection's header buffers. An idle connection holds its
// cconn and, for TLS, its record state; an idle h2 connection also its
// core (HPACK tables and streams' bookkeeping). Each loop keeps what was
// given back in free lists for its next exchanges (no lock: a loop's
// alone), and lets go, every idle sweep, of half of what none of its
// exchanges needed since the last (trimPools): a burst's buffers do not
// stay with a loop that has gone quiet.

// freeList is one of a loop's lists of things given back.
type freeList[T any] struct {
	items []T
	low   int // the fewest items held since the last trim
}

// pop takes an item; false when there is none.
func (f *freeList[T]) pop() (T, bool) {
	var zero T
	k := len(f.items)
	if k == 0 {
		return zero, false
	}
	x := f.items[k-1]
	f.items[k-1] = zero
	f.items = f.items[:k-1]
	if k-1 < f.low {
		f.low = k - 1
	}
	return x, true
}

// push keeps x, unless the list is full.
func (f *freeList[T]) push(x T) {
	if len(f.items) < maxPooled {
		f.items = append(f.items, x)
	}
}

// trim lets go of half of the items none of the loop's connections took
// since the last trim.
func (f *freeList[T]) trim() {
	n := len(f.items) - (f.low+1)/2
	clear(f.items[n:])
	f.items = f.items[:n]
	if n == 0 && cap(f.items) > 64 {
		f.items = nil
	}
	f.low = n
}

// trimPools trims the loop's free lists (the idle sweep).
func (l *eventLoop) trimPools() {
	l.bufs.trim()
	l.rawBufs.trim()
	l.outs.trim()
	l.exs.trim()
}

// getBuf is a read buffer (loopBufSize bytes).
func (l *eventLoop) getBuf() []byte {
	if b, ok := l.bufs.pop(); ok {
		return b
	}
	return make([]byte, loopBufSize)
}

// putBuf takes back a read buffer (nil: none).
func (l *eventLoop) putBuf(b []byte) {
	if b != nil {
		l.bufs.push(b)
	}
}

// getOut is an output buffer for a connection whose exchange starts
// (c.out, a TLS connection's sealed bytes, an h2 core's output), empty.
func (l *eventLoop) getOut() []byte {
	if b, ok := l.outs.pop(); ok {
		return b
	}
	return make([]byte, 0, outBufSize)
}

// putOut takes back an output buffer whose bytes are all written or
// dropped; one that grew past maxOutPooled is left to the collector.
func (l *eventLoop) putOut(b []byte) {
	if b != nil && cap(b) <= maxOutPooled {
		l.outs.push(b[:0])
	}
}

// getEx gives c an exchange for the request that starts on it.
func (l *eventLoop) getEx(c *cconn) *exchange.Exchange {
	if c.ex != &l.noEx && c.ex != nil {
		return c.ex
	}
	if ex, ok := l.exs.pop(); ok {
		c.ex = ex
	} else {
		c.ex = new(exchange.Exchange)
	}
	return c.ex
}

// putEx takes back c's exchange once it is done: c holds the idle one.
func (l *eventLoop) putEx(c *cconn) {
	ex := c.ex
	if ex == &l.noEx || ex == nil || ex.Busy() {
		return
	}
	c.ex = &l.noEx
	ex.Trim(4 << 10)
	l.exs.push(ex)
}

// idleBufs gives back the buffers of a connection that has nothing
// buffered and no exchange: its read buffer, its output buffers and its
// TLS record buffer (an h2 connection's core's output buffer too, when
// empty). A buffer comes again when bytes do.
func (l *eventLoop) idleBufs(c *cconn) {
	if c.busy() || c.n > 0 || len(c.out) > 0 || c.buffered() || c.xp == xpStream {
		return
	}
	if c.xp.sealed() && (c.tls.st.Buffered() > 0 || len(c.tls.wire) > 0) {
		return
	}
	l.putBuf(c.in)
	c.in = nil
	l.putOut(c.out)
	c.out = nil
	if !c.xp.sealed() {
		return
	}
	l.putOut(c.tls.wire)
	c.tls.wire = nil
	l.idleTLS(c)
	if h := c.h2; c.xp == xpH2 {
		l.putOut(h.spare)
		h.spare = nil
		if !h.bare && h.core != nil && len(h.streams) == 0 {
			// (Not while the loop runs streams: their answers come
			// soon. A worker may be writing into it: under its lock.)
			h.d.Lock()
			if len(h.core.Output()) == 0 {
				l.putOut(h.core.TakeOutput(nil))
				h.bare = true
			}
			h.d.Unlock()
		}
	}
}

// idleTLS takes back the record buffer of a connection with nothing
// buffered (readRecords gives one again).
func (l *eventLoop) idleTLS(c *cconn) {
	if !c.xp.sealed() {
		return
	}
	if b := c.tls.st.TakeBuffer(); b != nil {
		l.rawBufs.push(b)
	}
}

// giveRaw gives c's record state a buffer from the free list, if it has
// none (RawSpace would make one).
func (l *eventLoop) giveRaw(c *cconn) {
	k := len(l.rawBufs.items)
	if k > 0 && c.tls.st.GiveBuffer(l.rawBufs.items[k-1]) {
		l.rawBufs.pop()
	}
}
