//go:build linux

package evloop

import (
	"bytes"
	"crypto/tls"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// mem_test.go: what an idle TLS connection holds (mem_linux.go; the
// plain path's is testdata/evloop/idle.txt).

// noRecordBuffer tells whether st holds no ciphertext buffer (GiveBuffer
// takes one only then; what it was given is dropped with st).
func noRecordBuffer(st *tls13.State) bool {
	return st.GiveBuffer(make([]byte, tls13.MaxRecord))
}

// TestTLSIdleHoldsNothing: an HTTP/1.1 connection over TLS that has had
// its exchange holds no read buffer, output buffer, sealed-bytes buffer,
// record buffer or exchange; an h2 connection that has read what came
// holds no read or record buffer, and its core no output buffer.
func TestTLSIdleHoldsNothing(t *testing.T) {
	t.Run("h1", func(t *testing.T) {
		cli, srv := tlsPair(t)
		h := newLoopScript(t)
		h.sys.dial = "now"
		fd := h.sys.open("c1", -1)
		h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}})
		c := h.l.cl[fd]
		if c == nil {
			t.Fatal("not adopted")
		}
		deliver(t, h, fd, cli.Seal(nil, []byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")), 1<<20)
		if c.in == nil || c.ex == &h.l.noEx {
			t.Fatal("the exchange runs without its read buffer or exchange")
		}
		bfd, bf := h.sys.byName("b1")
		if bf == nil {
			t.Fatal("no backend connection")
		}
		bf.in = append(bf.in, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"...)
		h.l.backendEvent(h.l.bk[bfd], unix.EPOLLIN)
		got, err := openAll(t, cli, h.sys.fds[fd].sent)
		if err != nil || !bytes.HasPrefix(got, []byte("HTTP/1.1 200 OK\r\n")) {
			t.Fatalf("client read %q (%v)", got, err)
		}
		if c.busy() || c.in != nil || c.out != nil || c.tls.wire != nil || c.ex != &h.l.noEx || !noRecordBuffer(c.tls.st) {
			t.Errorf("idle: in=%v out=%v wire=%v exchange=%v record buffer=%v",
				c.in != nil, c.out != nil, c.tls.wire != nil, c.ex != &h.l.noEx, !noRecordBuffer(c.tls.st))
		}
	})
	t.Run("h2", func(t *testing.T) {
		cli, srv := tlsPair(t)
		h := newLoopScript(t)
		fd := h.sys.open("c1", -1)
		d := &recH2{core: h2srv.NewConn(h2srv.Config{})}
		h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}, h2: d})
		c := h.l.cl[fd]
		if c == nil {
			t.Fatal("not adopted")
		}
		h.l.flushDirty()
		deliver(t, h, fd, cli.Seal(nil, plaintextOf(1, 300)), 1<<20)
		if len(d.fed) != 300 {
			t.Fatalf("fed %d bytes, want 300", len(d.fed))
		}
		if c.in != nil || c.out != nil || c.h2.spare != nil || cap(d.core.Output()) != 0 || !noRecordBuffer(c.tls.st) {
			t.Errorf("idle: in=%v out=%v spare=%v core output=%d record buffer=%v",
				c.in != nil, c.out != nil, c.h2.spare != nil, cap(d.core.Output()), !noRecordBuffer(c.tls.st))
		}
	})
}
