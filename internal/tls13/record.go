package tls13

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync/atomic"

	"golang.org/x/crypto/chacha20poly1305"
)

// Record layer limits (RFC 8446 §5.1, §5.2).
const (
	headerLen     = 5
	MaxPlaintext  = 1 << 14            // a record's plaintext, content type excluded
	maxCiphertext = MaxPlaintext + 256 // TLSCiphertext.length
	MaxRecord     = headerLen + maxCiphertext
	tagLen        = 16 // AES-GCM and ChaCha20-Poly1305
	// keyUpdateAfter is the number of records sealed under one key after
	// which the sealer updates its key on its own (RFC 8446 §5.5: 2^24.5
	// full-size records for AES-GCM; the lowest limit of the three).
	keyUpdateAfter = 1 << 24
)

// Record content types.
const (
	typeChangeCipherSpec = 20
	typeAlert            = 21
	typeHandshake        = 22
	typeApplicationData  = 23
)

const (
	hsNewSessionTicket = 4
	hsKeyUpdate        = 24
	hsHeaderLen        = 4
)

// Alert descriptions (RFC 8446 §6).
const (
	alertCloseNotify       = 0
	alertUnexpectedMessage = 10
	alertBadRecordMAC      = 20
	alertRecordOverflow    = 22
	alertIllegalParameter  = 47
	alertDecodeError       = 50
	alertProtocolVersion   = 70
	alertLevelFatal        = 2
	alertLevelWarning      = 1
)

// MaxUseless is how many records in a row may carry no application data
// (empty application_data records, KeyUpdates) before the connection is
// refused, with unexpected_message: each costs an AEAD open and a
// KeyUpdate a key derivation, and a client could otherwise keep a loop
// busy with them while every other connection on it waits. crypto/tls's
// limit (maxUselessRecords), for the same reason.
const MaxUseless = 16

// PeerAlert is the error Read returns for an alert the peer sent (other
// than close_notify): its description (RFC 8446 §6). errors.Is(err,
// ErrAlert) holds for every one.
type PeerAlert uint8

func (a PeerAlert) Error() string        { return fmt.Sprintf("tls13: peer sent alert %d", uint8(a)) }
func (a PeerAlert) Is(target error) bool { return target == ErrAlert }

// alertError is a read error that ends the connection with a fatal
// alert of ours (RFC 8446 §6.2), which Alert seals.
type alertError struct {
	desc byte
	msg  string
}

func (e *alertError) Error() string { return e.msg }

// Errors Read returns. A clean close_notify is io.EOF. Every one but the
// peer's own alert (a PeerAlert, which is ErrAlert: nothing is sent back
// to it, §6) calls for a fatal alert of ours: Alert seals it.
var (
	ErrAlert    = errors.New("tls13: peer sent an alert")
	ErrProtocol = error(&alertError{alertUnexpectedMessage, "tls13: protocol error"})
	ErrDecode   = error(&alertError{alertDecodeError, "tls13: malformed message"})
	ErrIllegal  = error(&alertError{alertIllegalParameter, "tls13: illegal parameter"})
	ErrVersion  = error(&alertError{alertProtocolVersion, "tls13: record version not 0x0303"})
	ErrOverflow = error(&alertError{alertRecordOverflow, "tls13: record overflow"})
	ErrDecrypt  = error(&alertError{alertBadRecordMAC, "tls13: record authentication failed"})
	ErrUseless  = error(&alertError{alertUnexpectedMessage, "tls13: too many records without data"})
	// Not read errors.
	ErrUnsupported = errors.New("tls13: unsupported connection")
	ErrShutdown    = errors.New("tls13: write after close_notify")
)

// suite is one TLS 1.3 AEAD cipher suite.
type suite struct {
	hash   func() hash.Hash
	size   int // the hash's size (traffic secrets)
	keyLen int
	aead   func(key []byte) (cipher.AEAD, error)
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func suiteOf(id uint16) *suite {
	switch id {
	case tls.TLS_AES_128_GCM_SHA256:
		return &suite{sha256.New, crypto.SHA256.Size(), 16, gcm}
	case tls.TLS_AES_256_GCM_SHA384:
		return &suite{sha512.New384, crypto.SHA384.Size(), 32, gcm}
	case tls.TLS_CHACHA20_POLY1305_SHA256:
		return &suite{sha256.New, crypto.SHA256.Size(), 32, chacha20poly1305.New}
	}
	return nil
}

// Supported reports whether the record layer handles suite id.
func Supported(id uint16) bool { return suiteOf(id) != nil }

// expandLabel is HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
func (s *suite) expandLabel(secret []byte, label string, n int) []byte {
	info := make([]byte, 0, 4+6+len(label))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0) // context: empty
	out, err := hkdf.Expand(s.hash, secret, string(info), n)
	if err != nil {
		panic("tls13: " + err.Error()) // n is a key or IV length: never too long
	}
	return out
}

// half is one direction's traffic keys (RFC 8446 §7.3).
type half struct {
	secret []byte
	aead   cipher.AEAD
	iv     [12]byte
	seq    uint64
	nonce  [12]byte
}

func (h *half) set(s *suite, secret []byte) error {
	a, err := s.aead(s.expandLabel(secret, "key", s.keyLen))
	if err != nil {
		return err
	}
	h.secret, h.aead, h.seq = secret, a, 0
	copy(h.iv[:], s.expandLabel(secret, "iv", 12))
	return nil
}

// next moves to the next traffic secret (a KeyUpdate, RFC 8446 §7.2).
func (h *half) next(s *suite) error {
	return h.set(s, s.expandLabel(h.secret, "traffic upd", s.size))
}

// nonceFor is the per-record nonce: the IV XOR the sequence number.
func (h *half) nonceFor() []byte {
	h.nonce = h.iv
	var sq [8]byte
	binary.BigEndian.PutUint64(sq[:], h.seq)
	for i := 0; i < 8; i++ {
		h.nonce[4+i] ^= sq[i]
	}
	return h.nonce[:]
}

// Secrets is a TLS 1.3 connection's record state at the end of its
// handshake: the suite, the application traffic secrets of both
// directions and the sequence numbers already used under them.
type Secrets struct {
	Suite             uint16
	ReadSecret        []byte // the peer's (client's) application traffic secret
	WriteSecret       []byte // ours
	ReadSeq, WriteSeq uint64
}

// State is a TLS 1.3 record layer over one connection, after a handshake
// done elsewhere: it opens the records the peer sends (Feed, Read) and
// seals ours (Seal). Reads and writes may run in two goroutines (Conn);
// the read side touches the write side only through atomics (a KeyUpdate
// the peer asked for, sent by the next Seal).
type State struct {
	s       *suite
	in, out half

	// read side
	raw   []byte // ciphertext received: raw[:rn]
	rn    int
	plain []byte // opened application data not yet read (inside raw)
	pOff  int    // where plain starts in raw
	rerr  error  // sticky
	// A handshake message begun in one record and not yet ended (only a
	// KeyUpdate is accepted): its first hn bytes.
	hs [hsHeaderLen + 1]byte
	hn int
	// useless: records in a row that carried no application data.
	useless int

	// updateDue: the peer asked for our KeyUpdate (update_requested);
	// the next Seal sends it first.
	updateDue atomic.Bool
	askUpdate bool // the next KeyUpdate sent asks the peer's (write side)
	// closed: close_notify sealed; nothing more is.
	closed bool
}

// New makes the record state of a connection whose handshake ended with
// sec; raw is ciphertext already read past the handshake (crypto/tls's
// buffered input), which Read opens first.
func New(sec Secrets, raw []byte) (*State, error) {
	s := suiteOf(sec.Suite)
	if s == nil {
		return nil, ErrUnsupported
	}
	st := &State{s: s}
	if err := st.in.set(s, append([]byte(nil), sec.ReadSecret...)); err != nil {
		return nil, err
	}
	if err := st.out.set(s, append([]byte(nil), sec.WriteSecret...)); err != nil {
		return nil, err
	}
	st.in.seq, st.out.seq = sec.ReadSeq, sec.WriteSeq
	if len(raw) > 0 {
		if len(raw) > MaxRecord {
			st.raw = make([]byte, len(raw))
		}
		copy(st.RawSpace(), raw)
		st.rn = len(raw)
	}
	return st, nil
}

// RawSpace is where the next ciphertext read goes (then Filled). It is
// empty while a whole record or undelivered plaintext is buffered: read
// the plaintext out first.
func (st *State) RawSpace() []byte {
	if st.raw == nil {
		st.raw = make([]byte, MaxRecord)
	}
	if len(st.plain) > 0 {
		return nil
	}
	if st.pOff > 0 || st.rn == len(st.raw) && st.rn > 0 {
		st.compact()
	}
	return st.raw[st.rn:]
}

// compact moves the unopened bytes to the start of raw.
func (st *State) compact() {
	n := copy(st.raw, st.raw[st.pOff:st.rn])
	st.rn, st.pOff = n, 0
	if n == 0 && len(st.raw) > MaxRecord {
		st.raw = st.raw[:MaxRecord:MaxRecord]
	}
}

// TakeBuffer returns the ciphertext buffer when nothing is buffered in
// it (nil otherwise), for the caller to keep while the connection is
// idle; GiveBuffer hands one back (at least MaxRecord bytes) before the
// next read. An idle connection then holds no 17 KB buffer.
func (st *State) TakeBuffer() []byte {
	if st.raw == nil || st.rn != st.pOff || len(st.plain) > 0 || len(st.raw) != MaxRecord {
		return nil
	}
	b := st.raw
	st.raw, st.rn, st.pOff = nil, 0, 0
	return b
}

// GiveBuffer gives the state a ciphertext buffer if it has none.
func (st *State) GiveBuffer(b []byte) bool {
	if st.raw != nil || len(b) != MaxRecord {
		return false
	}
	st.raw, st.rn, st.pOff = b, 0, 0
	return true
}

// Filled records n bytes read into RawSpace.
func (st *State) Filled(n int) { st.rn += n }

// Buffered is what is held and not yet read: ciphertext not yet opened
// and plaintext opened but not yet read (a record whose plaintext did not
// fit the last Read). While it is not 0 a Read may return data without
// any more read from the socket -- whose readiness, once its bytes are
// all in raw, no poller reports again.
func (st *State) Buffered() int { return st.rn - st.pOff + len(st.plain) }

// Read copies opened application data into p. It opens the buffered
// records as needed; (0, nil) means a whole record has not arrived yet
// (read more into RawSpace). io.EOF is a close_notify; any other error
// ends the connection.
func (st *State) Read(p []byte) (int, error) {
	for {
		if len(st.plain) > 0 {
			n := copy(p, st.plain)
			st.plain = st.plain[n:]
			if len(st.plain) == 0 {
				st.plain = nil
			}
			return n, nil
		}
		if st.rerr != nil {
			return 0, st.rerr
		}
		if len(p) == 0 {
			return 0, nil
		}
		ok, err := st.openOne()
		if err != nil {
			st.rerr = err
			return 0, err
		}
		if !ok {
			return 0, nil
		}
	}
}

// openOne opens the record at the start of the buffered ciphertext, if
// it is whole: application data becomes st.plain, control records are
// acted on. Errors carry the alert they call for (alertError).
func (st *State) openOne() (bool, error) {
	b := st.raw[st.pOff:st.rn]
	if len(b) < headerLen {
		if st.pOff == st.rn {
			st.pOff, st.rn = 0, 0
		}
		return false, nil
	}
	typ, n := b[0], int(binary.BigEndian.Uint16(b[3:5]))
	if typ != typeApplicationData {
		// After the handshake every record is protected: a
		// change_cipher_spec is allowed only during it (§5), and
		// anything else unprotected is unexpected too.
		return false, ErrProtocol
	}
	if b[1] != 3 || b[2] != 3 {
		return false, ErrVersion
	}
	if n > maxCiphertext {
		return false, ErrOverflow
	}
	if n < tagLen {
		return false, ErrDecrypt // too short to authenticate
	}
	if len(b) < headerLen+n {
		return false, nil
	}
	if st.in.seq == ^uint64(0) {
		return false, ErrProtocol
	}
	ct := b[headerLen : headerLen+n]
	pt, err := st.in.aead.Open(ct[:0], st.in.nonceFor(), ct, b[:headerLen])
	if err != nil {
		return false, ErrDecrypt
	}
	st.in.seq++
	st.pOff += headerLen + n
	// The inner plaintext: content, the content type, zero padding; at
	// most 2^14+1 bytes in all, the padding counted (§5.4), which is
	// also what bounds the content to 2^14.
	if len(pt) > MaxPlaintext+1 {
		return false, ErrOverflow
	}
	i := len(pt) - 1
	for i >= 0 && pt[i] == 0 {
		i--
	}
	if i < 0 {
		return false, ErrProtocol // no content type (§5.4)
	}
	inner, content := pt[i], pt[:i]
	if st.hn > 0 && inner != typeHandshake {
		// A handshake message is not interleaved with other records
		// (§5.1).
		return false, ErrProtocol
	}
	if inner == typeApplicationData && len(content) > 0 {
		st.useless = 0
		st.plain = content
		return true, nil
	}
	// A record with no application data: bounded, however valid.
	if st.useless++; st.useless > MaxUseless {
		return false, ErrUseless
	}
	switch inner {
	case typeApplicationData:
		return true, nil // empty: allowed (§5.4), carries nothing
	case typeAlert:
		if len(content) != 2 {
			return false, ErrDecode // one alert, whole, per record (§5.1)
		}
		if content[1] == alertCloseNotify {
			return false, io.EOF
		}
		return false, PeerAlert(content[1])
	case typeHandshake:
		if len(content) == 0 {
			// No zero-length handshake fragments, padded or not (§5.1).
			return false, ErrProtocol
		}
		return true, st.handshake(content)
	}
	return false, ErrProtocol
}

// handshake acts on post-handshake messages from the client: KeyUpdate,
// the only one a client may send here (NewSessionTicket is the
// server's; no post-handshake authentication was offered). A message may
// come in fragments over several records (§5.1), kept in st.hs; a
// KeyUpdate changes the key, so it must end its record.
func (st *State) handshake(m []byte) error {
	for len(m) > 0 {
		k := copy(st.hs[st.hn:], m)
		st.hn += k
		m = m[k:]
		if st.hn >= 1 && st.hs[0] != hsKeyUpdate {
			return ErrProtocol
		}
		if st.hn >= hsHeaderLen && (st.hs[1] != 0 || st.hs[2] != 0 || st.hs[3] != 1) {
			return ErrDecode // a KeyUpdate's body is one byte
		}
		if st.hn < len(st.hs) {
			return nil // m is spent: the rest comes in the next record
		}
		req := st.hs[hsHeaderLen]
		st.hn = 0
		if req > 1 {
			return ErrIllegal // update_not_requested or update_requested (§4.6.3)
		}
		if len(m) > 0 {
			return ErrProtocol // a key change ends its record (§5.1)
		}
		if err := st.in.next(st.s); err != nil {
			return err
		}
		if req == 1 {
			st.updateDue.Store(true)
		}
	}
	return nil
}

// WriteDue reports whether Seal has something to send even with no data:
// the KeyUpdate the peer asked for.
func (st *State) WriteDue() bool { return st.updateDue.Load() }

// RequestKeyUpdate makes the next Seal send a KeyUpdate asking the peer
// to update its key too (tests, the start-up self-test).
func (st *State) RequestKeyUpdate() { st.updateDue.Store(true); st.askUpdate = true }

// Seal appends plaintext p to wire as records of at most MaxPlaintext
// bytes each, preceded by a KeyUpdate when one is due. An empty p seals
// only what is due.
func (st *State) Seal(wire, p []byte) []byte {
	if st.closed {
		return wire
	}
	if st.updateDue.Load() || st.out.seq >= keyUpdateAfter {
		req := byte(0)
		if st.askUpdate {
			req = 1
		}
		st.askUpdate = false
		st.updateDue.Store(false)
		wire = st.sealRecord(wire, []byte{hsKeyUpdate, 0, 0, 1, req}, typeHandshake)
		if err := st.out.next(st.s); err != nil {
			panic("tls13: " + err.Error()) // the suite's key size: cannot fail
		}
	}
	for len(p) > 0 {
		n := min(len(p), MaxPlaintext)
		wire = st.sealRecord(wire, p[:n], typeApplicationData)
		p = p[n:]
	}
	return wire
}

// SealEmpty appends an application_data record with no content (allowed,
// §5.4: it carries nothing; tests send them to check that they count for
// nothing).
func (st *State) SealEmpty(wire []byte) []byte {
	if st.closed {
		return wire
	}
	return st.sealRecord(wire, nil, typeApplicationData)
}

// SealRaw appends one record whose inner plaintext is content, then the
// content type typ (a content ending in zeros with typ 0 is padding),
// sealed as it is, unchecked; NextWriteKey moves the write side to its
// next traffic secret, as sending a KeyUpdate does. For tests and tools
// that must send what a correct peer would not: fragments, malformed or
// unexpected messages.
func (st *State) SealRaw(wire, content []byte, typ byte) []byte {
	return st.sealRecord(wire, content, typ)
}

// NextWriteKey: see SealRaw.
func (st *State) NextWriteKey() {
	if err := st.out.next(st.s); err != nil {
		panic("tls13: " + err.Error()) // the suite's key size: cannot fail
	}
}

// CloseNotify appends a close_notify alert; nothing is sealed after it.
func (st *State) CloseNotify(wire []byte) []byte {
	if st.closed {
		return wire
	}
	wire = st.sealRecord(wire, []byte{alertLevelWarning, alertCloseNotify}, typeAlert)
	st.closed = true
	return wire
}

// Alert appends the fatal alert the read error calls for (RFC 8446
// §6.2: bad_record_mac, record_overflow, decode_error, unexpected_message,
// illegal_parameter, protocol_version), sealed under the current write
// key, and closes the write side: nothing is sealed after it, a
// close_notify included. With no such error (none yet, a clean
// close_notify, the peer's own alert, which gets no answer) it appends
// nothing, and closes the write side all the same: the caller is
// closing the connection.
func (st *State) Alert(wire []byte) []byte {
	if st.closed {
		return wire
	}
	var ae *alertError
	if errors.As(st.rerr, &ae) {
		wire = st.sealRecord(wire, []byte{alertLevelFatal, ae.desc}, typeAlert)
	}
	st.closed = true
	return wire
}

func (st *State) sealRecord(wire, p []byte, typ byte) []byte {
	n := len(p) + 1 + tagLen
	start := len(wire)
	need := start + headerLen + n
	if cap(wire) < need {
		w := make([]byte, start, max(need, 2*cap(wire)))
		copy(w, wire)
		wire = w
	}
	wire = append(wire, typeApplicationData, 3, 3, byte(n>>8), byte(n))
	hdr := wire[start : start+headerLen]
	body := len(wire)
	wire = append(wire, p...)
	wire = append(wire, typ)
	sealed := st.out.aead.Seal(wire[body:body], st.out.nonceFor(), wire[body:], hdr)
	st.out.seq++
	return wire[:body+len(sealed)]
}
