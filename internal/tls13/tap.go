package tls13

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// Tap is the net.Conn a crypto/tls connection makes its handshake over,
// so that the record layer can carry the connection on afterwards from
// documented APIs alone (see the package doc):
//
//   - it gives crypto/tls what it reads a record at a time, never a byte
//     past the end of the record crypto/tls is reading: crypto/tls stops
//     reading at the peer's Finished, so what the Tap read past it is the
//     ciphertext the record layer opens first, and crypto/tls opened no
//     record under the peer's application key (the read sequence number
//     is 0);
//   - it keeps the protected records crypto/tls reads and writes (a few
//     KB: the handshake flights, a session ticket), which Take opens with
//     the secrets from the key log to learn which key each was sealed
//     under: the records crypto/tls wrote under our application key are
//     the write sequence number, proved by opening each of them;
//   - its KeyLog is the connection's Config.KeyLogWriter (TapConfig sets
//     it on a server), from which Take has the four traffic secrets.
//
// After Take, crypto/tls must not use the connection again; after
// Release (a connection the record layer does not take) the Tap passes
// reads and writes through, the bytes it holds first.
//
// A Tap is used by one goroutine until Take or Release (the handshake's);
// after Release reads and writes may run in two.
type Tap struct {
	net.Conn
	server bool

	// Reading: rbuf[roff:] was read from the socket and not yet given to
	// crypto/tls; of the record being given, rpos bytes are given so far
	// and its header is in rhdr once they pass.
	rbuf []byte
	roff int
	rhdr [headerLen]byte
	rpos int
	// Writing: the record being written, as for reading.
	whdr [headerLen]byte
	wpos int
	// The protected records read (given to crypto/tls) and written, whole,
	// headers included, until Take.
	inRecs, outRecs []byte
	pass            bool // Released: reads and writes pass through

	// The key log: one client random, four secrets.
	random  []byte
	secrets [4][]byte
	logErr  error
}

// The traffic secrets in the order of Tap.secrets, by key-log label
// (NSS key log format, as crypto/tls writes it).
const (
	clientHS = iota
	serverHS
	clientApp
	serverApp
)

var keyLogLabels = [4]string{
	clientHS:  "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
	serverHS:  "SERVER_HANDSHAKE_TRAFFIC_SECRET",
	clientApp: "CLIENT_TRAFFIC_SECRET_0",
	serverApp: "SERVER_TRAFFIC_SECRET_0",
}

// tapReadBuf is what the Tap reads from the socket at a time: a
// ClientHello with a post-quantum key share fits.
const tapReadBuf = 4096

// NewTap makes a Tap over c for the server side of a connection (server)
// or the client side.
func NewTap(c net.Conn, server bool) *Tap { return &Tap{Conn: c, server: server} }

// Read gives crypto/tls what it asks for, up to the end of the record it
// is reading.
func (t *Tap) Read(p []byte) (int, error) {
	if t.pass {
		if t.roff < len(t.rbuf) {
			n := copy(p, t.rbuf[t.roff:])
			t.roff += n
			if t.roff == len(t.rbuf) {
				t.rbuf, t.roff = nil, 0
			}
			return n, nil
		}
		return t.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if t.roff == len(t.rbuf) {
		if t.rbuf == nil {
			t.rbuf = make([]byte, 0, tapReadBuf)
		}
		m, err := t.Conn.Read(t.rbuf[:cap(t.rbuf)])
		if m <= 0 {
			t.rbuf, t.roff = t.rbuf[:0], 0
			if err == nil {
				err = io.ErrNoProgress
			}
			return 0, err
		}
		t.rbuf, t.roff = t.rbuf[:m], 0
	}
	b := t.rbuf[t.roff:]
	// Up to the end of the header, then of the record.
	limit := headerLen - t.rpos
	if t.rpos >= headerLen {
		limit = headerLen + int(binary.BigEndian.Uint16(t.rhdr[3:5])) - t.rpos
	}
	n := min(len(p), len(b), limit)
	copy(p, b[:n])
	t.roff += n
	t.inRecs, t.rpos = advance(&t.rhdr, t.rpos, b[:n], t.inRecs)
	return n, nil
}

// Write passes crypto/tls's records to the socket, keeping the
// protected ones.
func (t *Tap) Write(p []byte) (int, error) {
	if !t.pass {
		rest := p
		for len(rest) > 0 {
			n := headerLen - t.wpos
			if t.wpos >= headerLen {
				n = headerLen + int(binary.BigEndian.Uint16(t.whdr[3:5])) - t.wpos
			}
			n = min(n, len(rest))
			t.outRecs, t.wpos = advance(&t.whdr, t.wpos, rest[:n], t.outRecs)
			rest = rest[n:]
		}
	}
	return t.Conn.Write(p)
}

// advance moves a record stream on by b, which lies within one record
// (pos bytes of it before b): the header is kept in hdr, and a protected
// record (outer type application_data) is appended to recs whole once
// its header is known. It returns recs and the position in the next
// record (0 at a record's end).
func advance(hdr *[headerLen]byte, pos int, b, recs []byte) ([]byte, int) {
	if pos < headerLen {
		k := copy(hdr[pos:], b)
		pos += k
		b = b[k:]
		if pos == headerLen && hdr[0] == typeApplicationData {
			recs = append(recs, hdr[:]...)
		}
	}
	if hdr[0] == typeApplicationData {
		recs = append(recs, b...)
	}
	pos += len(b)
	if pos == headerLen+int(binary.BigEndian.Uint16(hdr[3:5])) {
		pos = 0
	}
	return recs, pos
}

// KeyLog is the writer for the connection's Config.KeyLogWriter.
func (t *Tap) KeyLog() io.Writer { return (*tapKeyLog)(t) }

type tapKeyLog Tap

// Write takes one key-log line ("LABEL CLIENT_RANDOM SECRET\n", hex).
func (k *tapKeyLog) Write(line []byte) (int, error) {
	t := (*Tap)(k)
	f := bytes.Fields(line)
	if len(f) != 3 {
		t.logErr = errors.New("tls13: key log: malformed line")
		return len(line), nil
	}
	for i, l := range keyLogLabels {
		if string(f[0]) != l {
			continue
		}
		random, err1 := hex.DecodeString(string(f[1]))
		secret, err2 := hex.DecodeString(string(f[2]))
		switch {
		case err1 != nil || err2 != nil:
			t.logErr = errors.New("tls13: key log: malformed line")
		case t.random != nil && !bytes.Equal(t.random, random):
			t.logErr = errors.New("tls13: key log: two client randoms")
		case t.secrets[i] != nil:
			t.logErr = fmt.Errorf("tls13: key log: %s twice", l)
		default:
			t.random, t.secrets[i] = random, secret
		}
	}
	// Labels not needed (TLS 1.2's CLIENT_RANDOM, early secrets) are
	// ignored; never an error to crypto/tls, which would fail the
	// handshake over it.
	return len(line), nil
}

// Take is the record state of tc, a TLS 1.3 connection whose handshake
// crypto/tls has just completed over t, and the ciphertext read past it.
// Every protected record crypto/tls read must open under the peer's
// handshake key, and every one it wrote under our handshake key and then
// our application key, in order: the application records counted are the
// write sequence number. Any doubt is an error (ErrUnsupported): tc then
// carries on with crypto/tls (Release). After a nil error tc must not be
// used.
func (t *Tap) Take(tc *tls.Conn) (Secrets, []byte, error) {
	var sec Secrets
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || cs.Version != tls.VersionTLS13 || !Supported(cs.CipherSuite) {
		return sec, nil, ErrUnsupported
	}
	if t.pass {
		return sec, nil, fmt.Errorf("%w: released", ErrUnsupported)
	}
	if t.logErr != nil {
		return sec, nil, fmt.Errorf("%w: %v", ErrUnsupported, t.logErr)
	}
	for i, s := range t.secrets {
		if s == nil {
			return sec, nil, fmt.Errorf("%w: key log has no %s", ErrUnsupported, keyLogLabels[i])
		}
	}
	if t.rpos != 0 || t.wpos != 0 {
		return sec, nil, fmt.Errorf("%w: a record read or written in part", ErrUnsupported)
	}
	s := suiteOf(cs.CipherSuite)
	theirHS, ourHS, theirApp, ourApp := t.secrets[clientHS], t.secrets[serverHS], t.secrets[clientApp], t.secrets[serverApp]
	if !t.server {
		theirHS, ourHS, theirApp, ourApp = ourHS, theirHS, ourApp, theirApp
	}
	// Read: the peer's handshake records, and nothing under its
	// application key.
	n, rest, err := count(s, theirHS, t.inRecs, nil)
	if err != nil {
		return sec, nil, err
	}
	if len(rest) > 0 {
		return sec, nil, fmt.Errorf("%w: crypto/tls read past the handshake (record %d)", ErrUnsupported, n)
	}
	// Written: ours under the handshake key, then under the application
	// key handshake messages only (session tickets).
	_, rest, err = count(s, ourHS, t.outRecs, nil)
	if err != nil {
		return sec, nil, err
	}
	a, rest, err := count(s, ourApp, rest, func(typ byte) bool { return typ == typeHandshake })
	if err != nil {
		return sec, nil, err
	}
	if len(rest) > 0 {
		return sec, nil, fmt.Errorf("%w: a record written under no known key", ErrUnsupported)
	}
	sec = Secrets{Suite: cs.CipherSuite, ReadSecret: theirApp, WriteSecret: ourApp, ReadSeq: 0, WriteSeq: uint64(a)}
	raw := append([]byte(nil), t.rbuf[t.roff:]...)
	t.rbuf, t.inRecs, t.outRecs = nil, nil, nil
	return sec, raw, nil
}

// count opens the records at the start of recs under secret, from
// sequence number 0, until one does not open (or its inner type fails
// ok, when given): it returns how many opened and the records left.
func count(s *suite, secret, recs []byte, ok func(byte) bool) (int, []byte, error) {
	var h half
	if err := h.set(s, secret); err != nil {
		return 0, nil, err
	}
	var scratch [MaxRecord]byte
	n := 0
	for len(recs) > 0 {
		if len(recs) < headerLen {
			return n, nil, fmt.Errorf("%w: a record kept in part", ErrUnsupported)
		}
		l := headerLen + int(binary.BigEndian.Uint16(recs[3:5]))
		if l > len(recs) || l-headerLen > maxCiphertext || l-headerLen < tagLen {
			return n, nil, fmt.Errorf("%w: a record kept in part", ErrUnsupported)
		}
		pt, err := h.aead.Open(scratch[:0], h.nonceFor(), recs[headerLen:l], recs[:headerLen])
		if err != nil {
			return n, recs, nil
		}
		i := len(pt) - 1
		for i >= 0 && pt[i] == 0 {
			i--
		}
		if i < 0 || ok != nil && !ok(pt[i]) {
			return n, recs, fmt.Errorf("%w: record %d under the application key is no handshake message", ErrUnsupported, n)
		}
		h.seq++
		n++
		recs = recs[l:]
	}
	return n, recs, nil
}

// Release makes t pass reads and writes through from now on (crypto/tls
// keeps the connection), the bytes it read and did not give first.
func (t *Tap) Release() {
	t.pass = true
	t.inRecs, t.outRecs = nil, nil
	t.secrets = [4][]byte{}
	if t.roff == len(t.rbuf) {
		t.rbuf, t.roff = nil, 0 // no read buffer kept for the connection's life
	}
}

// SyscallConn reaches the socket (peer-gone checks, descriptors).
func (t *Tap) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := t.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// TapConfig returns a copy of cfg for servers whose connections run over
// Taps: each handshake on a Tap from a client that offers TLS 1.3 gets a
// copy of cfg whose KeyLogWriter is that Tap's KeyLog
// (GetConfigForClient; the session ticket keys stay cfg's, as crypto/tls
// uses the first Config's unless the copy sets its own). cfg must not
// set GetConfigForClient or KeyLogWriter itself.
func TapConfig(cfg *tls.Config) *tls.Config {
	base := cfg.Clone()
	out := cfg.Clone()
	out.GetConfigForClient = func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
		t, ok := chi.Conn.(*Tap)
		if !ok || t.pass {
			return nil, nil
		}
		for _, v := range chi.SupportedVersions {
			if v == tls.VersionTLS13 {
				c := base.Clone()
				c.KeyLogWriter = t.KeyLog()
				return c, nil
			}
		}
		return nil, nil
	}
	return out
}

// Client makes a TLS 1.3 handshake as a client over raw with crypto/tls
// (cfg, whose KeyLogWriter it sets) and returns the record state that
// carries the connection on, with the handshake's outcome: for tests and
// tools that must send what crypto/tls cannot (a KeyUpdate, empty
// records, a broken record). A server's session ticket is a handshake
// message the state refuses: leave cfg.ClientSessionCache nil, so that
// none is sent.
func Client(raw net.Conn, cfg *tls.Config) (*State, tls.ConnectionState, error) {
	tap := NewTap(raw, false)
	cfg = cfg.Clone()
	cfg.KeyLogWriter = tap.KeyLog()
	cfg.MinVersion = tls.VersionTLS13
	tc := tls.Client(tap, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, tls.ConnectionState{}, err
	}
	sec, rest, err := tap.Take(tc)
	if err != nil {
		return nil, tls.ConnectionState{}, err
	}
	st, err := New(sec, rest)
	return st, tc.ConnectionState(), err
}
