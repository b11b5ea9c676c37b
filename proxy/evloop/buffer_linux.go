//go:build linux

package evloop

import (
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// buffer_linux.go: response buffering on the loops (docs/buffering.md).
// A response whose client is slower than its backend goes on being read
// at the backend's speed: what the client has not taken waits in c.rb
// (memory, then a temporary file, under the process's budget, shared
// with every other front end: Config.Resp), behind c.out, and the
// backend connection is released as soon as the body is in (finish). The
// backend is paused, as without a buffer, only when the buffer cannot
// take one more read (room).

// refillSize is how much of the buffer goes into c.out at a time: three
// TLS records, whose sealed bytes then fit the 64 KiB a TLS connection
// keeps for them (flushTLS).
const refillSize = 48 << 10

// bufferable tells whether the response of c's exchange, whose head rh
// was parsed from data, may be held back: buffering is on, for its app,
// and the response is not a stream (respbuf.Streams).
func (l *eventLoop) bufferable(c *cconn, data []byte, rh *pipeline.RawHead) bool {
	if c.rb != nil && c.rb.Started() {
		// (Empty: a response starts only once the last one is written.)
		// Each response starts its buffer afresh, under the limits of
		// the moment.
		c.rb.Close()
	}
	b := l.ff.cfg.Resp
	return c.ex.mode != bodyNone && b.On() && !c.ex.a.Policy.ResponseBufferingOff &&
		!respbuf.Streams(rh.ContentType.Of(data), rh.AccelBuffering.Of(data))
}

// room tells whether c's backend may be read on while its client has a
// backlog: the response is buffered, and its buffer can take a whole read
// (reserved now, so hold always takes it).
func (l *eventLoop) room(c *cconn) bool {
	if !c.ex.buffer {
		return false
	}
	if c.rb == nil {
		c.rb = &respbuf.Buffer{}
	}
	if !c.rb.Started() {
		c.rb.Start(l.ff.cfg.Resp, l.sys)
	}
	return c.rb.Reserve(loopBufSize)
}

// hold puts body bytes the client cannot take yet in c's buffer (room
// made space for them).
func (l *eventLoop) hold(c *cconn, data []byte) {
	if c.rb == nil || !c.rb.Started() {
		l.room(c) // (a backlog that came with this very read)
	}
	c.rb.Hold(data)
}

// refill moves the buffer's next bytes into c.out (empty); false when the
// temporary file could not be read (c is then closed, its exchange
// aborted).
func (l *eventLoop) refill(c *cconn) bool {
	if cap(c.out) < refillSize {
		c.out = make([]byte, 0, refillSize)
	}
	n, err := c.rb.Read(c.out[:refillSize])
	c.out = c.out[:n]
	if err != nil {
		l.ff.cfg.Log.Error("response buffer: temporary file read failed; connection closed", "error", err)
		if c.busy() {
			l.abort(c, pipeline.OutBackendFailed)
		}
		if c.str != nil {
			l.dropResp(c)
			l.streamEnd(c, 0)
		} else {
			l.closeClient(c)
		}
		return false
	}
	return true
}

// resumeBackend reads c's backend again where it was paused for the
// client: once the client has taken everything, or while the buffer has
// room for one more read.
func (l *eventLoop) resumeBackend(c *cconn) {
	ex := &c.ex
	bc := ex.b
	if bc == nil || bc.fd < 0 || ex.state != Relaying || bc.events&unix.EPOLLIN != 0 {
		return
	}
	if c.backlog() && !l.room(c) {
		return
	}
	l.setBackendEvents(bc, bc.events|unix.EPOLLIN|unix.EPOLLRDHUP)
	ex.deadline = l.nowNs + ex.a.Shared.Idle.Load()
}

// dropResp gives back c's response buffer: memory, temporary file and
// their charge.
func (l *eventLoop) dropResp(c *cconn) {
	if c.rb != nil {
		c.rb.Close()
	}
}
