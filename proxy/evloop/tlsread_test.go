//go:build linux

package evloop

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// tlsread_test.go: what a loop opens of a TLS client's records reaches
// the connection's consumer, whatever the records' sizes and however the
// ciphertext arrives, with epoll as the kernel drives it (level
// triggered: an event while unread bytes wait in the socket, none
// otherwise).

// recH2 is an H2Conn that records the plaintext fed to it (no core runs:
// what these tests look at is the record layer under it).
type recH2 struct {
	core *h2srv.Conn
	fed  []byte
}

func (r *recH2) SetWake(func()) {}
func (r *recH2) Feed(b []byte, _ func(*h2srv.Stream) bool, evs []h2srv.Event) ([]h2srv.Event, error) {
	r.fed = append(r.fed, b...)
	return evs, nil
}
func (r *recH2) Lock()                          {}
func (r *recH2) Unlock()                        {}
func (r *recH2) Core() *h2srv.Conn              { return r.core }
func (r *recH2) TakeOutput(spare []byte) []byte { return r.core.TakeOutput(spare) }
func (r *recH2) Status() H2Status               { return H2Status{} }
func (r *recH2) GoAway()                        {}
func (r *recH2) Closed()                        {}

// deliver gives the loop wire as the kernel would: chunk bytes at a time
// arriving in the socket, an EPOLLIN for each arrival and again while
// unread bytes remain and the loop listens for them (bounded).
func deliver(t *testing.T, h *loopScript, fd int, wire []byte, chunk int) {
	t.Helper()
	f := h.sys.fds[fd]
	for len(wire) > 0 {
		n := min(chunk, len(wire))
		f.in = append(f.in, wire[:n]...)
		wire = wire[n:]
		for k := 0; ; k++ {
			c := h.l.cl[fd]
			if c == nil || len(f.in) == 0 || c.events&unix.EPOLLIN == 0 {
				break
			}
			if k == 1000 {
				t.Fatal("the loop does not take the bytes waiting in the socket")
			}
			h.l.clientEvent(c, unix.EPOLLIN)
		}
	}
}

// plaintextOf is n bytes no two adjacent records share a pattern of.
func plaintextOf(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}

// TestTLSH2AllPlaintextFed: an h2 connection on a loop gets every byte
// its client sent to its core, for record sequences around the loop's
// 16 KiB read buffer (a record whose plaintext overflows what the buffer
// has left, with no ciphertext after it: the rest of it waited, opened,
// in the record state while the loop slept on a socket with nothing more
// to come -- the h2 request body that got no answer), delivered whole, a
// record at a time, and in chunks that split records anywhere.
func TestTLSH2AllPlaintextFed(t *testing.T) {
	seqs := [][]int{
		{100, tls13.MaxPlaintext},
		{1, tls13.MaxPlaintext},
		{tls13.MaxPlaintext - 1, 2},
		{tls13.MaxPlaintext, tls13.MaxPlaintext},
		{9, 16300},
		{60, 9, 16255},
		{200, 9, 16375, 9, 100},
		{5000, 5000, 5000, 5000},
		{16383, 16383, 16383},
		{1, 1, 1, tls13.MaxPlaintext, 1},
	}
	for _, sizes := range seqs {
		var wire, want []byte
		cli, srv := tlsPair(t)
		for i, n := range sizes {
			p := plaintextOf(i, n)
			want = append(want, p...)
			wire = cli.Seal(wire, p)
		}
		for _, chunk := range []int{len(wire), tls13.MaxRecord, 17, 1000, 4096, 16384 + 22 + 5} {
			t.Run(fmt.Sprintf("%v/chunk%d", sizes, chunk), func(t *testing.T) {
				_, srv := tlsPair(t)
				h := newLoopScript(t)
				fd := h.sys.open("c1", -1)
				d := &recH2{core: h2srv.NewConn(h2srv.Config{})}
				h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}, h2: d})
				if h.l.cl[fd] == nil {
					t.Fatal("not adopted")
				}
				deliver(t, h, fd, wire, chunk)
				if !bytes.Equal(d.fed, want) {
					t.Fatalf("fed %d of %d bytes (the rest never reached the core)", len(d.fed), len(want))
				}
			})
		}
		_ = srv
	}
}

// TestTLSPipelinedAllServed: HTTP/1.1 requests pipelined in records whose
// plaintext fills the loop's 16 KiB buffer exactly with the last
// request's head left, opened, in the record state: each is served once
// the one before it ends (after, pullTLS), the last one too, with nothing
// more arriving from the client.
func TestTLSPipelinedAllServed(t *testing.T) {
	reqA := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	reqC := "GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
	headB := "GET /b HTTP/1.1\r\nHost: x\r\nX-Pad: "
	pad := loopBufSize - len(reqA) - len(headB) - len("\r\n\r\n")
	reqB := headB + string(bytes.Repeat([]byte{'p'}, pad)) + "\r\n\r\n"
	if len(reqA)+len(reqB) != loopBufSize {
		t.Fatal("bad arithmetic")
	}
	cli, srv := tlsPair(t)
	wire := cli.Seal(nil, []byte(reqA))
	wire = cli.Seal(wire, []byte(reqB+reqC)) // 16 KiB + len(reqC): two records

	h := newLoopScript(t)
	h.l.ff.maxHeader = 2 * loopBufSize
	h.sys.dial = "now"
	fd := h.sys.open("c1", -1)
	h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}})
	if h.l.cl[fd] == nil {
		t.Fatal("not adopted")
	}
	deliver(t, h, fd, wire, len(wire))
	for _, path := range []string{"/a", "/b", "/c"} {
		_, bf := h.sys.byName("b1")
		if bf == nil || !bytes.Contains(bf.sent, []byte("GET "+path+" ")) {
			t.Fatalf("%s never reached the backend (the loop waits for a client that has sent it)", path)
		}
		bfd, _ := h.sys.byName("b1")
		bf.in = append(bf.in, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"...)
		h.l.backendEvent(h.l.bk[bfd], unix.EPOLLIN)
	}
	got, err := openAll(t, cli, h.sys.fds[fd].sent)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(got, []byte("HTTP/1.1 200 OK\r\n")); n != 3 {
		t.Fatalf("client read %d answers, want 3:\n%q", n, got)
	}
}

// TestTLSUselessFlood: a client sending 100,000 records that carry no
// data -- empty application_data records, or KeyUpdates asking for ours
// -- is cut off after tls13.MaxUseless of them in a row, with an
// unexpected_message alert, having cost the loop one read of them: the
// rest is never read.
func TestTLSUselessFlood(t *testing.T) {
	for _, kind := range []string{"empty", "keyupdate"} {
		// The flood, sealed once (tlsPair's secrets are fixed: a fresh
		// pair reads it).
		cli, _ := tlsPair(t)
		wire := cli.Seal(nil, []byte("PRI")) // some data first: the count is of records in a row
		for range 100000 {
			if kind == "empty" {
				wire = cli.SealEmpty(wire)
			} else {
				cli.RequestKeyUpdate()
				wire = cli.Seal(wire, nil)
			}
		}
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/h2=%v", kind, h2), func(t *testing.T) {
				cli, srv := tlsPair(t)
				h := newLoopScript(t)
				fd := h.sys.open("c1", -1)
				a := adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}}
				if h2 {
					a.h2 = &recH2{core: h2srv.NewConn(h2srv.Config{})}
				}
				h.l.adopt(a)
				deliver(t, h, fd, wire, len(wire))
				f := h.sys.fds[fd]
				if !f.closed {
					t.Fatal("the connection is still open")
				}
				if read := len(wire) - len(f.in); read > tls13.MaxRecord {
					t.Errorf("the loop read %d bytes of the flood, more than one record buffer", read)
				}
				got, err := openAll(t, cli, f.sent)
				if err != tls13.PeerAlert(10) {
					t.Fatalf("client read %q then %v, want unexpected_message (10)", got, err)
				}
			})
		}
	}
}

// TestTLSAlertOnBadRecord: a record that fails to authenticate gets
// bad_record_mac, sealed under the current key, before the close; one
// too long gets record_overflow.
func TestTLSAlertOnBadRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mk    func(cli *tls13.State) []byte
		alert tls13.PeerAlert
	}{
		{"tampered", func(cli *tls13.State) []byte { w := cli.Seal(nil, []byte("GET / HTTP/1.1\r\n")); w[9] ^= 1; return w }, 20},
		{"overflow", func(*tls13.State) []byte { return []byte{23, 3, 3, 0x41, 0x01} }, 22},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := tlsPair(t)
			h := newLoopScript(t)
			fd := h.sys.open("c1", -1)
			h.l.adopt(adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}})
			deliver(t, h, fd, tc.mk(cli), 1<<20)
			f := h.sys.fds[fd]
			if !f.closed {
				t.Fatal("the connection is still open")
			}
			if got, err := openAll(t, cli, f.sent); err != tc.alert {
				t.Fatalf("client read %q then %v, want alert %d", got, err, uint8(tc.alert))
			}
		})
	}
}
