package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// h2Out (used with x/net's server only, SENTRY_H2_SERVER=xnet; the own
// server's driver has its writer built in, h2own.go) gathers what x/net's
// h2 server writes on one connection and writes
// it to the TLS connection from a goroutine of its own, so that the
// responses of several streams that end close together leave in one TLS
// record and one write(2).
//
// x/net flushes its 4 KiB frame buffer whenever its write queue runs dry,
// in a goroutine per flush (writeFrameAsync), and schedules nothing else
// until that flush returns: under h2load -m 10 most flushes carried one
// response, and the client-side write(2) calls were a fifth of the CPU
// (proxy/doc.go, "TLS and HTTP/2"). Here a Write only appends to a buffer
// and returns: x/net moves on to the next frames while the previous batch
// is in the kernel, and the next batch is whatever arrived meanwhile. An
// idle connection is not delayed: the first Write starts the writer at
// once.
//
// Decisions:
//   - The writer goroutine exists only while there is something to write
//     (started by the Write that finds it idle, gone once the buffer is
//     empty), so an idle connection costs no goroutine and none can leak.
//   - Writes block once h2OutLimit bytes wait (x/net's flow control would
//     let a stream queue far more): a client that stops reading stalls
//     x/net as it would on the socket. A connection holds at most about
//     twice that while it writes (the batch in the kernel and the next),
//     and keeps one buffer of at most h2OutSpare between batches: reused,
//     it keeps the two buffers hot; pooled across connections instead
//     (sync.Pool), it cost 10-15% of the h2 path's requests per CPU
//     second in four alternating runs, as buffers put back on one P were
//     missed on another and reallocated. Large bodies are copied once
//     more than before, into the batch.
//   - server.write_timeout is applied here, per write(2), as x/net's
//     WriteByteTimeout was: each write must progress within it. x/net's
//     own write deadlines are ignored (it clears them after each Write,
//     which would now return before the bytes leave).
//   - The first write error is kept and returned by every later Write, so
//     x/net sees a broken connection at its next write and closes it.
//   - Close flushes what is buffered first (a GOAWAY, the end of the last
//     response), waiting at most h2OutCloseWait. On a connection whose
//     writes failed it closes the socket without a TLS close_notify.
type h2Out struct {
	net.Conn               // the TLS connection
	timeout  time.Duration // idle write timeout (0: none)

	mu      sync.Mutex
	cond    sync.Cond // signalled when buf is taken or the writer stops
	buf     []byte    // gathered, not yet handed to the writer
	spare   []byte    // the writer's last buffer, for reuse
	busy    bool      // the writer goroutine is running
	err     error     // first write error: returned by every later Write
	closing bool
}

const (
	h2OutLimit     = 64 << 10
	h2OutCloseWait = time.Second
	h2OutSpare     = 16 << 10 // the largest buffer kept for the next batch
)

// errH2OutClosed is what a Write after Close returns.
var errH2OutClosed = errors.New("h2: write on a closed connection")

func newH2Out(c net.Conn, timeout time.Duration) *h2Out {
	o := &h2Out{Conn: c, timeout: timeout}
	o.cond.L = &o.mu
	return o
}

// Write queues b. It blocks only while h2OutLimit bytes already wait.
func (o *h2Out) Write(b []byte) (int, error) {
	o.mu.Lock()
	for o.err == nil && !o.closing && len(o.buf) >= h2OutLimit {
		o.cond.Wait()
	}
	switch {
	case o.err != nil:
		err := o.err
		o.mu.Unlock()
		return 0, err
	case o.closing:
		o.mu.Unlock()
		return 0, errH2OutClosed
	}
	o.buf = append(o.buf, b...)
	start := !o.busy
	o.busy = true
	o.mu.Unlock()
	if start {
		go o.writer()
	}
	return len(b), nil
}

// writer writes batches until the buffer is empty or a write fails.
func (o *h2Out) writer() {
	o.mu.Lock()
	for len(o.buf) > 0 && o.err == nil {
		b := o.buf
		o.buf, o.spare = o.spare[:0], nil
		o.cond.Broadcast() // room for blocked Writes
		o.mu.Unlock()
		err := o.writeAll(b)
		o.mu.Lock()
		if err != nil && o.err == nil {
			o.err = err
		}
		if cap(b) <= h2OutSpare {
			o.spare = b[:0]
		}
	}
	if o.err != nil {
		o.buf = nil
	}
	o.busy = false
	o.cond.Broadcast()
	o.mu.Unlock()
}

// writeAll writes b under the idle write timeout: the deadline moves on
// as long as each write(2) makes progress (x/net's writeWithByteTimeout).
func (o *h2Out) writeAll(b []byte) error {
	if o.timeout <= 0 {
		_, err := o.Conn.Write(b)
		return err
	}
	for {
		_ = o.Conn.SetWriteDeadline(time.Now().Add(o.timeout))
		n, err := o.Conn.Write(b)
		b = b[n:]
		if len(b) == 0 || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// SetWriteDeadline is ignored: write deadlines are h2Out's (see above).
func (o *h2Out) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets the read deadline only.
func (o *h2Out) SetDeadline(t time.Time) error { return o.Conn.SetReadDeadline(t) }

// Close waits (at most h2OutCloseWait) for buffered bytes to be written,
// then closes the connection.
func (o *h2Out) Close() error {
	o.mu.Lock()
	o.closing = true
	o.cond.Broadcast()
	if o.busy {
		// A writer stuck on a client that reads nothing is cut short.
		_ = o.Conn.SetWriteDeadline(time.Now().Add(h2OutCloseWait))
		for o.busy {
			o.cond.Wait()
		}
	}
	broken := o.err != nil
	o.mu.Unlock()
	if nc, ok := o.Conn.(interface{ NetConn() net.Conn }); ok && broken {
		// A write failed or timed out: no close_notify, which
		// crypto/tls would try to write (for up to 5 s) to the same
		// client that stopped reading.
		return nc.NetConn().Close()
	}
	return o.Conn.Close()
}
