package proxy

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
)

// closeRec is a backend connection that records Close.
type closeRec struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeRec) Close() error             { c.closed.Store(true); return nil }
func (c *closeRec) Read([]byte) (int, error) { return 0, nil }
func (c *closeRec) Write(b []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return len(b), nil
}

func recConn() (*idleConn, *closeRec) {
	r := &closeRec{}
	return &idleConn{Conn: r, timeout: new(atomic.Int64)}, r
}

// TestAbortSparesRetakenConn: a stream reset closes its backend connection
// only while no other exchange has bound it since. fasthttp puts a
// connection back in its pool before relay unbinds it; another stream
// that takes it meanwhile must not have it closed under it.
func TestAbortSparesRetakenConn(t *testing.T) {
	c, rec := recConn()
	old, next := &abortable{}, &abortable{}
	if !old.bind(c) {
		t.Fatal("bind on a live stream refused")
	}
	// Released to the pool, taken by the next exchange before old unbinds.
	if !next.bind(c) {
		t.Fatal("second bind refused")
	}
	old.abort()
	if rec.closed.Load() || c.killed.Load() {
		t.Fatal("the reset of the old stream closed a connection another exchange holds")
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("the next exchange's write failed: %v", err)
	}
	// The holder's own reset still cuts it.
	next.abort()
	if !rec.closed.Load() {
		t.Fatal("the holder's reset did not close its connection")
	}
}

// TestAbortedConnIsNamed: a connection closed by a reset is killed, and
// whoever uses it next (it may be back in fasthttp's pool) gets
// errConnAborted, which relay retries without blaming the backend
// (failureOf: FailBroken; RetryIfErr) -- not a bare "use of closed
// network connection", which counted towards ejection.
func TestAbortedConnIsNamed(t *testing.T) {
	c, rec := recConn()
	ab := &abortable{}
	ab.bind(c)
	ab.abort()
	if !rec.closed.Load() || !c.killed.Load() {
		t.Fatal("abort of the holder did not close and mark its connection")
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); !errors.Is(err, errConnAborted) {
		t.Fatalf("write on an aborted conn: %v, want errConnAborted", err)
	}
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, errConnAborted) {
		t.Fatalf("read on an aborted conn: %v, want errConnAborted", err)
	}
	if f := failureOf(errConnAborted); f != failureOf(net.ErrClosed) {
		t.Fatalf("failureOf(errConnAborted) = %v, want it retried as a broken keep-alive", f)
	}
	// An unbound exchange's reset closes nothing.
	c2, rec2 := recConn()
	ab2 := &abortable{}
	ab2.bind(c2)
	ab2.unbind()
	ab2.abort()
	if rec2.closed.Load() || c2.killed.Load() {
		t.Fatal("a reset after unbind closed the connection")
	}
	// Binding after the reset closes and marks the new connection.
	c3, rec3 := recConn()
	if ab2.bind(c3) || !rec3.closed.Load() || !c3.killed.Load() {
		t.Fatal("bind after the reset did not refuse and close")
	}
}
