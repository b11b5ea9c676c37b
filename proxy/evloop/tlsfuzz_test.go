//go:build linux

package evloop

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// FuzzTLSLoopRecords feeds a loop's TLS connection (adopted, the loop's
// own code on scripted syscalls) a random sequence of records, delivered
// in random chunks: application data of any size, empty records,
// KeyUpdates whole and in fragments, floods of both, alerts, records
// tampered with or malformed in their header or their inner plaintext.
// A model of the record layer says what must come of it:
//
//   - h2 (the first byte odd): every byte of application data before the
//     first record that ends the connection reaches the connection's
//     consumer (all of it while the connection stays open), and the
//     connection is closed exactly when the model ends it;
//   - HTTP/1.1: whatever the requests do, nothing panics;
//   - both: what the loop sent opens, in order, with the client's keys
//     (KeyUpdates followed), and ends as the model says: the fatal alert
//     the bad record calls for, a close_notify answering the client's,
//     nothing after the client's own alert -- and MaxUseless records
//     without data in a row are the most the loop accepts.
//
// The seeds in testdata/fuzz/FuzzTLSLoopRecords run with go test.
func FuzzTLSLoopRecords(f *testing.F) {
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) == 0 {
			return
		}
		h2 := prog[0]&1 == 1
		in := prog[1:]
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return int(b)
		}
		cli, srv := tlsPair(t)
		h := newLoopScript(t)
		h.sys.next = 1 << 16 // no descriptor of this process: a hand-off's FileConn fails
		fd := h.sys.open("c1", -1)
		var d *recH2
		a := adoption{fd: fd, peer: netip.MustParseAddr("192.0.2.1"), st: srv, cs: &tls.ConnectionState{}}
		if h2 {
			d = &recH2{core: h2srv.NewConn(h2srv.Config{})}
			a.h2 = d
		}
		h.l.adopt(a)
		if h.l.cl[fd] == nil {
			t.Fatal("not adopted")
		}
		m := &recordModel{alert: -1}
		var wire []byte
		send := func(chunk int) {
			// At most 4096 arrivals per delivery: a small chunk of much
			// data costs time, not coverage.
			deliver(t, h, fd, wire, max(chunk, len(wire)/4096))
			wire = wire[:0]
		}
		for ops := 0; len(in) > 0 && !m.ended && ops < 200 && len(m.expect) < 1<<20; ops++ {
			switch op := next() % 14; op {
			case 0, 1, 2:
				n := (next()<<6 | next()>>2) % (tls13.MaxPlaintext + 1)
				wire = m.data(cli, wire, max(n, 1))
			case 3:
				wire = m.empty(cli, wire)
			case 4:
				wire = m.keyUpdate(cli, wire, byte(next()&1), 0)
			case 5:
				wire = m.keyUpdate(cli, wire, byte(next()&1), 1+next()%4)
			case 6:
				count, ku := 1+next()*8, next()&1 == 1
				for i := 0; i < count && !m.ended; i++ {
					if ku {
						wire = m.keyUpdate(cli, wire, 1, 0)
					} else {
						wire = m.empty(cli, wire)
					}
				}
			case 7:
				send(1 + (next()<<7 | next()))
			case 8:
				w := cli.Seal(nil, []byte("tampered"))
				w[5+next()%(len(w)-5)] ^= byte(1 + next()%255)
				wire = m.bad(wire, w, 20) // bad_record_mac
			case 9:
				switch next() % 4 {
				case 0:
					wire = m.bad(wire, []byte{22, 3, 3, 0, 1, 0}, 10) // unprotected
				case 1:
					wire = m.bad(wire, []byte{23, 3, 1, 0, 20}, 70) // record version
				case 2:
					wire = m.bad(wire, []byte{23, 3, 3, 0x41, 0x01}, 22) // too long
				case 3:
					wire = m.bad(wire, []byte{23, 3, 3, 0, byte(next() % 16)}, 20) // too short
				}
			case 10:
				switch next() % 5 {
				case 0:
					wire = m.inner(cli, wire, []byte{4, 0, 0, 1, 0, 22}, true, 10) // a NewSessionTicket (4) from the client
				case 1:
					wire = m.inner(cli, wire, []byte{2, 40, 0, 21}, true, 50) // an alert of 3 bytes
				case 2:
					wire = m.inner(cli, wire, []byte{0, 0, 0}, false, 10) // all padding: no content type
				case 3:
					wire = m.inner(cli, wire, []byte{24, 0, 0, 1, 2, 22}, true, 47) // KeyUpdate request 2
				case 4:
					wire = m.inner(cli, wire, []byte{24, 0, 0, 2, 0, 0, 22}, true, 50) // KeyUpdate of 2 bytes
				}
			case 11:
				wire = m.peerAlert(cli, wire, byte(next()))
			case 12:
				n, pad := 1+next()*16, next()*8
				inner := append(bytes.Repeat([]byte{byte(m.sent)}, n), 23)
				inner = append(inner, make([]byte, pad)...)
				if len(inner) <= tls13.MaxPlaintext+1 {
					m.expect = append(m.expect, inner[:n]...)
					m.sent++
					m.useless = 0
					wire = sealInner(cli, wire, inner)
				}
			case 13:
				n := 1 + (next()<<8|next())%(3*tls13.MaxPlaintext)
				p := bytes.Repeat([]byte{byte(m.sent)}, n)
				m.expect = append(m.expect, p...)
				m.sent++
				m.useless = 0
				wire = cli.Seal(wire, p)
			}
		}
		send(len(wire) + 1)
		fdd := h.sys.fds[fd]
		if h2 {
			if fdd.closed != m.ended {
				t.Fatalf("closed %v, the model ended %v (alert %d)", fdd.closed, m.ended, m.alert)
			}
			if m.ended && !bytes.HasPrefix(m.expect, d.fed) || !m.ended && !bytes.Equal(d.fed, m.expect) {
				t.Fatalf("fed %d bytes, the model %d (ended %v)", len(d.fed), len(m.expect), m.ended)
			}
		}
		got, err := openAll(t, cli, fdd.sent)
		var pa tls13.PeerAlert
		isAlert := errors.As(err, &pa)
		if err != nil && err != io.EOF && !isAlert {
			t.Fatalf("the client cannot read what the loop sent: %v", err)
		}
		if !h2 {
			return // HTTP/1.1 answers and closes on its own account
		}
		if len(got) > 0 {
			t.Fatalf("the client read data from a core that wrote none: %q", got)
		}
		switch {
		case !m.ended:
			if err != nil {
				t.Fatalf("open connection: the client read %v", err)
			}
		case m.alert >= 0:
			if !isAlert || int(pa) != m.alert {
				t.Fatalf("the client read %v, want alert %d", err, m.alert)
			}
		case m.alert == -2:
			if err != io.EOF {
				t.Fatalf("the client read %v, want close_notify", err)
			}
		case m.alert == -3:
			if err != nil {
				t.Fatalf("the client read %v after its own alert, want nothing", err)
			}
		}
	})
}

// recordModel is what the record layer must make of the records a fuzz
// program sends: the application data it passes on, and how the
// connection ends.
type recordModel struct {
	expect  []byte
	sent    int // data records, for their patterns
	useless int // records without data in a row
	ended   bool
	// alert: the fatal alert the end calls for; -2: close_notify (the
	// client's, answered); -3: the client's own alert (no answer); -1:
	// not ended.
	alert int
}

func (m *recordModel) end(alert int) {
	if !m.ended {
		m.ended, m.alert = true, alert
	}
}

// countUseless counts a record without data; past MaxUseless it ends
// the connection (unexpected_message) and reports false.
func (m *recordModel) countUseless() bool {
	m.useless++
	if m.useless > tls13.MaxUseless {
		m.end(10)
		return false
	}
	return true
}

func (m *recordModel) data(cli *tls13.State, wire []byte, n int) []byte {
	p := plaintextOf(m.sent, n)
	m.sent++
	m.expect = append(m.expect, p...)
	m.useless = 0
	return cli.Seal(wire, p)
}

func (m *recordModel) empty(cli *tls13.State, wire []byte) []byte {
	m.countUseless()
	return cli.SealEmpty(wire)
}

// keyUpdate sends a KeyUpdate (asking for ours when req is 1), in two
// records split after split bytes when split is not 0.
func (m *recordModel) keyUpdate(cli *tls13.State, wire []byte, req byte, split int) []byte {
	msg := []byte{24, 0, 0, 1, req, 22}
	if split == 0 {
		m.countUseless()
		wire = sealInner(cli, wire, msg)
		cli.NextWriteKey()
		return wire
	}
	first := append(append([]byte(nil), msg[:split]...), 22)
	wire = sealInner(cli, wire, first)
	if !m.countUseless() {
		return wire
	}
	wire = sealInner(cli, wire, msg[split:])
	m.countUseless()
	cli.NextWriteKey()
	return wire
}

// bad appends w, a record the layer must refuse with alert.
func (m *recordModel) bad(wire, w []byte, alert int) []byte {
	m.end(alert)
	return append(wire, w...)
}

// inner seals inner (content, type, padding) as one record, which the
// layer must refuse with alert; counted says whether the layer counts
// it as a record without data first (it does for every record with a
// content type: only one with none fails before).
func (m *recordModel) inner(cli *tls13.State, wire, inner []byte, counted bool, alert int) []byte {
	if !counted || m.countUseless() {
		m.end(alert)
	}
	return sealInner(cli, wire, inner)
}

// peerAlert sends an alert of the client's: close_notify (desc 0) is
// answered with ours, any other is not answered.
func (m *recordModel) peerAlert(cli *tls13.State, wire []byte, desc byte) []byte {
	if m.countUseless() {
		if desc == 0 {
			m.end(-2)
		} else {
			m.end(-3)
		}
	}
	return sealInner(cli, wire, []byte{2, desc, 21})
}

// sealInner seals inner, a whole inner plaintext (content, type,
// padding), as one record.
func sealInner(cli *tls13.State, wire, inner []byte) []byte {
	return cli.SealRaw(wire, inner[:len(inner)-1], inner[len(inner)-1])
}
