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
