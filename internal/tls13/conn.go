package tls13

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// closeNotifyWait bounds the close_notify write of Close.
const closeNotifyWait = time.Second

// Conn is a blocking net.Conn over a record State: what a connection the
// event loops served goes on as when they hand it to a goroutine
// (fasthttp, an upgrade). Pre is plaintext the loop had already opened,
// read first. Reads and writes may run in two goroutines; a KeyUpdate the
// peer asks for is sent by the reader under the write lock.
type Conn struct {
	net.Conn // the socket
	st       *State
	cs       tls.ConnectionState
	pre      []byte

	rmu sync.Mutex
	wmu sync.Mutex
	wb  []byte
}

// NewConn makes a blocking connection over nc whose records st seals and
// opens; cs is what ConnectionState reports (the handshake's).
func NewConn(nc net.Conn, st *State, cs tls.ConnectionState, pre []byte) *Conn {
	return &Conn{Conn: nc, st: st, cs: cs, pre: pre}
}

func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := c.st.Read(p)
		if c.st.WriteDue() {
			if werr := c.flushDue(); werr != nil && err == nil && n == 0 {
				return 0, werr
			}
		}
		if err != nil && err != io.EOF {
			c.alert()
		}
		if n > 0 || err != nil {
			return n, err
		}
		m, rerr := c.Conn.Read(c.st.RawSpace())
		c.st.Filled(m)
		if rerr != nil {
			if m > 0 {
				continue
			}
			if rerr == io.EOF {
				// A close without close_notify: a truncation, which
				// HTTP/1.1 framing detects itself (as crypto/tls's
				// callers see it, io.ErrUnexpectedEOF would break
				// keep-alive clients that just close).
				return 0, io.EOF
			}
			return 0, rerr
		}
	}
}

// alert sends the fatal alert a read error calls for (State.Alert), best
// effort, before the caller closes the connection.
func (c *Conn) alert() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wb = c.st.Alert(c.wb[:0]); len(c.wb) > 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeNotifyWait))
		_, _ = c.Conn.Write(c.wb)
	}
}

// flushDue sends the KeyUpdate the peer asked for.
func (c *Conn) flushDue() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wb = c.st.Seal(c.wb[:0], nil)
	_, err := c.Conn.Write(c.wb)
	return err
}

func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.st.closed {
		// close_notify went out: nothing more is sealed, and bytes
		// reported written must not be dropped.
		return 0, ErrShutdown
	}
	written := 0
	for len(p) > 0 {
		// At most four records per write(2): a large body is not sealed
		// whole into memory first.
		n := min(len(p), 4*MaxPlaintext)
		c.wb = c.st.Seal(c.wb[:0], p[:n])
		if _, err := c.Conn.Write(c.wb); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseWrite sends close_notify (as crypto/tls's CloseWrite: the socket
// stays open for reading).
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wb = c.st.CloseNotify(c.wb[:0])
	_, err := c.Conn.Write(c.wb)
	return err
}

// Close sends close_notify, best effort, and closes the socket.
func (c *Conn) Close() error {
	if c.wmu.TryLock() {
		c.wb = c.st.CloseNotify(c.wb[:0])
		if len(c.wb) > 0 {
			// As crypto/tls's Close: a peer that reads nothing does
			// not hold the close up for long.
			_ = c.Conn.SetWriteDeadline(time.Now().Add(closeNotifyWait))
			_, _ = c.Conn.Write(c.wb)
		}
		c.wmu.Unlock()
	}
	return c.Conn.Close()
}

// Handshake and ConnectionState make the connection look like a
// *tls.Conn to fasthttp (RequestCtx.IsTLS) and to package proxy.
func (c *Conn) Handshake() error                     { return nil }
func (c *Conn) ConnectionState() tls.ConnectionState { return c.cs }

// SyscallConn reaches the socket (peer-gone checks, lingering close).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}
