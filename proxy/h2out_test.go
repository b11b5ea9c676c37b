package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"
)

// TestH2OutKeepsOrderAndFlushesOnClose: bytes leave in the order x/net
// wrote them, whatever the batching, and Close writes what is still
// buffered (a GOAWAY, the end of a response) before it closes.
func TestH2OutKeepsOrderAndFlushesOnClose(t *testing.T) {
	a, b := net.Pipe()
	o := newH2Out(a, time.Second)
	var want bytes.Buffer
	got := make(chan []byte, 1)
	go func() { all, _ := io.ReadAll(b); got <- all }()
	for i := 0; i < 2000; i++ {
		chunk := bytes.Repeat([]byte{byte(i)}, 1+i%300)
		want.Write(chunk)
		if n, err := o.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case all := <-got:
		if !bytes.Equal(all, want.Bytes()) {
			t.Fatalf("read %d bytes, want %d in order", len(all), want.Len())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reader did not see the end of the stream")
	}
	if _, err := o.Write([]byte("late")); !errors.Is(err, errH2OutClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestH2OutStuckClientTimesOut: a client that reads nothing fills the
// buffer; Writes then block, and once no byte has left for write_timeout
// the connection fails: the blocked Write and every later one return the
// error, and Close does not hang.
func TestH2OutStuckClientTimesOut(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	o := newH2Out(a, 50*time.Millisecond)
	chunk := make([]byte, 16<<10)
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < 2*h2OutLimit/len(chunk)+4; i++ {
			if _, err := o.Write(chunk); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("writes to a stuck client ended with %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writes to a stuck client never failed")
	}
	if _, err := o.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a later write: %v, want the first error again", err)
	}
	done := make(chan struct{})
	go func() { o.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
}

// TestH2OutBatches: writes made while a write(2) is in progress leave
// together in the next one.
func TestH2OutBatches(t *testing.T) {
	c := &slowConn{release: make(chan struct{})}
	o := newH2Out(c, 0)
	o.Write([]byte("a")) // the writer takes it and blocks in Write
	c.waitWrites(1)
	for _, s := range []string{"b", "c", "d"} {
		o.Write([]byte(s))
	}
	close(c.release)
	o.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.writes) != 2 || c.writes[0] != "a" || c.writes[1] != "bcd" {
		t.Fatalf("writes %q, want [a bcd]", c.writes)
	}
}

type slowConn struct {
	net.Conn
	release chan struct{}
	mu      sync.Mutex
	writes  []string
}

func (c *slowConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, string(b))
	c.mu.Unlock()
	<-c.release
	return len(b), nil
}

func (c *slowConn) waitWrites(n int) {
	for i := 0; i < 1000; i++ {
		c.mu.Lock()
		k := len(c.writes)
		c.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *slowConn) SetWriteDeadline(time.Time) error { return nil }
func (c *slowConn) Close() error                     { return nil }

// TestH2CopyHeader: the response header reaches x/net's map with its
// repeated fields whole and without the fields h2 forbids; a pooled
// h2Req leaves nothing of one stream in the next.
func TestH2CopyHeader(t *testing.T) {
	hr := h2ReqPool.Get().(*h2Req)
	h := &hr.ctx.Response.Header
	h.Set("Content-Type", "text/plain")
	h.Add("Set-Cookie", "a=1")
	h.Add("Set-Cookie", "b=2")
	h.Set("Connection", "keep-alive")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Upgrade", "h2c")
	h.Set("X-Custom-Thing", "v")
	hdr := http.Header{}
	copyH2Header(hdr, h)
	if got := hdr.Values("Set-Cookie"); len(got) != 2 || got[0] != "a=1" || got[1] != "b=2" {
		t.Errorf("Set-Cookie = %q", got)
	}
	if hdr.Get("Content-Type") != "text/plain" || hdr.Get("X-Custom-Thing") != "v" {
		t.Errorf("header %v", hdr)
	}
	for _, k := range []string{"Connection", "Keep-Alive", "Upgrade"} {
		if _, ok := hdr[k]; ok {
			t.Errorf("%s copied to h2", k)
		}
	}
	hr.release()
	hr = h2ReqPool.Get().(*h2Req)
	defer hr.release()
	if n := hr.ctx.Response.Header.Len(); n > 1 { // a fresh Response may carry its default Content-Type
		t.Errorf("a pooled h2Req kept %d response fields", n)
	}
	if hr.ctx.Request.Header.Len() != 0 || len(hr.ctx.Request.Body()) != 0 {
		t.Error("a pooled h2Req kept its request")
	}
}
