//go:build linux

package evloop

import (
	"bytes"
	"crypto/tls"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/tls13"
)

// tlsPair is a client's and a server's record state over made-up
// traffic secrets (the handshake is not what these tests look at).
func tlsPair(t *testing.T) (cli, srv *tls13.State) {
	t.Helper()
	a, b := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	var err error
	if cli, err = tls13.New(tls13.Secrets{Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: b, WriteSecret: a}, nil); err != nil {
		t.Fatal(err)
	}
	if srv, err = tls13.New(tls13.Secrets{Suite: tls.TLS_AES_128_GCM_SHA256, ReadSecret: a, WriteSecret: b}, nil); err != nil {
		t.Fatal(err)
	}
	return cli, srv
}

// openAll opens everything wire holds with st, as the client would.
func openAll(t *testing.T, st *tls13.State, wire []byte) ([]byte, error) {
	t.Helper()
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := st.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
		if n > 0 {
			continue
		}
		if len(wire) == 0 {
			return got, nil
		}
		m := copy(st.RawSpace(), wire)
		st.Filled(m)
		wire = wire[m:]
	}
}

// TestTLSKeyUpdatePendingAtHandoff: the KeyUpdate a client asked for
// could not be written (EAGAIN) when a request the loop hands off
// arrived with it. The hand-off must wait for it: the record state goes
// on under the updated write key, and a KeyUpdate left behind in the
// loop's buffer makes everything after it unreadable to the client.
// (The fd is no real descriptor, so the hand-off fails and answers the
// sealed 503: what the client reads shows whether the KeyUpdate went
// first.)
func TestTLSKeyUpdatePendingAtHandoff(t *testing.T) {
	h := newLoopScript(t)
	h.sys.next = 1 << 16 // no descriptor of this process: the hand-off's FileConn fails
	fd := h.sys.open("c1", 0)
	cli, srv := tlsPair(t)
	h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}})
	c := h.l.cl[fd]
	if c == nil {
		t.Fatal("not adopted")
	}
	cli.RequestKeyUpdate()
	// An unfinished head: the loop hands it to fasthttp.
	h.sys.fds[fd].in = cli.Seal(nil, []byte("GET / HTTP/1.1\r\nHost"))
	h.l.clientEvent(c, unix.EPOLLIN)
	h.sys.fds[fd].cap = -1
	if c := h.l.cl[fd]; c != nil {
		h.l.clientEvent(c, unix.EPOLLOUT)
	}
	got, err := openAll(t, cli, h.sys.fds[fd].sent)
	if err != nil {
		t.Fatalf("the client cannot read what it was sent: %v (%q)", err, got)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 503 ")) {
		t.Fatalf("client read %q, want the hand-off's 503 after the KeyUpdate", got)
	}
}

// TestTLSAdoptRefusedAtCap: a connection adopted while the listener's
// other connections already fill server.max_conns (one accepted while
// the count moved: package proxy refuses the rest at accept) gets the
// sealed 503, is counted and closed, and never becomes a client.
func TestTLSAdoptRefusedAtCap(t *testing.T) {
	h := newLoopScript(t)
	h.l.ff.maxConns = 1
	h.l.ff.cfg.OtherConns = func() int { return 1 }
	fd := h.sys.open("c1", -1)
	cli, srv := tlsPair(t)
	h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}})
	if (fd < len(h.l.cl) && h.l.cl[fd] != nil) || h.l.ff.conns.Load() != 0 {
		t.Fatal("adopted past max_conns")
	}
	if f := h.sys.fds[fd]; !f.closed {
		t.Error("not closed")
	}
	got, err := openAll(t, cli, h.sys.fds[fd].sent)
	if err != nil || !bytes.HasPrefix(got, []byte("HTTP/1.1 503 ")) || !bytes.Contains(got, []byte("too many connections")) {
		t.Errorf("client read %q (%v), want the sealed 503", got, err)
	}
	if !slices.Contains(h.out, "too many connections") {
		t.Errorf("not counted; script output: %q", h.out)
	}
}
