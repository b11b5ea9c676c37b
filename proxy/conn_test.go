package proxy

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/sert"
)

// TestReadLosingToTheCutFails: when the termination timer has won the
// latch before the response's first bytes are read, idleConn.Read hands
// fasthttp an error instead of the bytes (a whole small response would
// otherwise end the exchange and return the connection to the pool while
// the timer closes it); when the read wins, the bytes pass and the cut is
// off.
func TestReadLosingToTheCutFails(t *testing.T) {
	c, err := sert.New(sert.Config{Params: sert.DefaultParams(), Classes: []*sert.ClassConfig{{Name: "gold", Lower: 100 * time.Millisecond, Upper: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	for _, cutFirst := range []bool{true, false} {
		a, b := net.Pipe()
		ic := &idleConn{Conn: a, timeout: new(atomic.Int64)}
		var x pipeline.Term
		x.Arm(c.Class(0), t0)
		if cutFirst {
			if _, cut := x.Due(t0.Add(time.Second)); !cut {
				t.Fatal("the timer did not win the latch")
			}
		}
		ic.term.Store(&x)
		go func() { b.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) }()
		buf := make([]byte, 64)
		n, err := ic.Read(buf)
		switch {
		case cutFirst && (n != 0 || !errors.Is(err, errTermCut)):
			t.Errorf("read after the cut: %d bytes, %v; want 0, errTermCut", n, err)
		case !cutFirst && (n == 0 || err != nil || x.Cut()):
			t.Errorf("read before the cut: %d bytes, %v, cut %v; want the bytes and no cut", n, err, x.Cut())
		}
		a.Close()
		b.Close()
	}
}

// TestIdleDeadlineFollowsReload: idleConn owns its deadlines (fasthttp's
// per-exchange SetReadDeadline is ignored), so a timeout changed by a
// reload must reach a connection at its next read, not timeout/16 after
// its last push: after a push with 10 s, a read under 30 ms times out in
// about 30 ms; and a timeout turned off clears the deadline.
func TestIdleDeadlineFollowsReload(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	timeout := new(atomic.Int64)
	timeout.Store(int64(10 * time.Second))
	ic := &idleConn{Conn: a, timeout: timeout}
	go func() { _, _ = b.Read(make([]byte, 1)) }()
	if _, err := ic.Write([]byte("x")); err != nil { // pushes a 10 s write deadline
		t.Fatal(err)
	}
	go func() { _, _ = b.Write([]byte("y")) }()
	if _, err := ic.Read(make([]byte, 1)); err != nil { // and a 10 s read deadline
		t.Fatal(err)
	}
	_ = ic.SetReadDeadline(time.Time{}) // what fasthttp does per exchange: no effect
	timeout.Store(int64(30 * time.Millisecond))
	start := time.Now()
	_, err := ic.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read after the reload: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the read timed out after %v: the old 10 s deadline held", d)
	}
	timeout.Store(0)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = b.Write([]byte("z"))
	}()
	if _, err := ic.Read(make([]byte, 1)); err != nil {
		t.Fatalf("read with the timeout off: %v, want the byte (the deadline cleared)", err)
	}
}

// TestIdleResponseTimeoutWhole: fasthttp's SetReadDeadline after writing
// a request starts the wait for the response, so the backend gets the
// whole timeout for its first byte even when the connection's last push
// was moments before (its previous response): the read times out no
// sooner than the timeout after the call. (A deadline never fires early;
// only the lower bound is asserted.)
func TestIdleResponseTimeoutWhole(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	const timeout = 1600 * time.Millisecond
	to := new(atomic.Int64)
	to.Store(int64(timeout))
	ic := &idleConn{Conn: a, timeout: to}
	go func() { _, _ = b.Write([]byte("y")) }()
	if _, err := ic.Read(make([]byte, 1)); err != nil { // the previous response: a push
		t.Fatal(err)
	}
	time.Sleep(90 * time.Millisecond) // under timeout/16 (100 ms): refresh alone would not push again

	_ = ic.SetReadDeadline(time.Time{})
	start := time.Now()
	_, err := ic.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read: %v, want a timeout", err)
	}
	if d := time.Since(start); d < timeout-30*time.Millisecond {
		t.Fatalf("the response wait timed out after %v, want the whole %v", d, timeout)
	}
}
