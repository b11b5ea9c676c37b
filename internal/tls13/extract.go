package tls13

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"reflect"
)

// Extract reads, from a server-side crypto/tls connection whose TLS 1.3
// handshake has just completed and that nothing else uses, what the
// record layer needs to carry on without it: the suite, both application
// traffic secrets, both sequence numbers (the server's is not 0: Go sends
// its session tickets under the application key after its Finished), and
// the ciphertext crypto/tls read past the client's Finished (its rawInput
// buffer), returned as raw.
//
// crypto/tls exports none of it, so Extract reads the Conn's unexported
// fields by reflection, read-only: in and out (halfConn: seq,
// trafficSecret), rawInput, input, hand, sendBuf and vers. That layout is
// crypto/tls's own and may change with Go: Extract checks that every
// field is where and what it expects and fails otherwise, and SelfTest
// checks the values against crypto/tls itself at start-up.
//
// It refuses a connection with anything half-done: application data
// already opened (input), a handshake message read but not handled
// (hand), records queued but not sent (sendBuf).
func Extract(tc *tls.Conn) (sec Secrets, raw []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: crypto/tls layout: %v", ErrUnsupported, r)
		}
	}()
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || cs.Version != tls.VersionTLS13 || !Supported(cs.CipherSuite) {
		return sec, nil, ErrUnsupported
	}
	v := reflect.ValueOf(tc).Elem()
	if vers := field(v, "vers", reflect.Uint16).Uint(); vers != tls.VersionTLS13 {
		return sec, nil, fmt.Errorf("%w: vers %#x", ErrUnsupported, vers)
	}
	in, out := field(v, "in", reflect.Struct), field(v, "out", reflect.Struct)
	sec.Suite = cs.CipherSuite
	if sec.ReadSecret, err = secretOf(in); err != nil {
		return sec, nil, err
	}
	if sec.WriteSecret, err = secretOf(out); err != nil {
		return sec, nil, err
	}
	sec.ReadSeq, sec.WriteSeq = seqOf(in), seqOf(out)
	if n := bufferLen(field(v, "hand", reflect.Struct)); n != 0 {
		return sec, nil, fmt.Errorf("%w: %d handshake bytes pending", ErrUnsupported, n)
	}
	inp := field(v, "input", reflect.Struct)
	if s, i := field(inp, "s", reflect.Slice), field(inp, "i", reflect.Int64); int64(s.Len()) != i.Int() {
		return sec, nil, fmt.Errorf("%w: application data already opened", ErrUnsupported)
	}
	if n := field(v, "sendBuf", reflect.Slice).Len(); n != 0 {
		return sec, nil, fmt.Errorf("%w: %d bytes unsent", ErrUnsupported, n)
	}
	rb := field(v, "rawInput", reflect.Struct)
	buf, off := field(rb, "buf", reflect.Slice).Bytes(), int(field(rb, "off", reflect.Int).Int())
	raw = append([]byte(nil), buf[off:]...)
	return sec, raw, nil
}

// field is v's field name, which must be of kind k.
func field(v reflect.Value, name string, k reflect.Kind) reflect.Value {
	f := v.FieldByName(name)
	if !f.IsValid() || f.Kind() != k {
		panic(fmt.Sprintf("field %s: want %v", name, k))
	}
	return f
}

func secretOf(h reflect.Value) ([]byte, error) {
	s := field(h, "trafficSecret", reflect.Slice)
	if s.Type().Elem().Kind() != reflect.Uint8 || s.Len() == 0 {
		return nil, fmt.Errorf("%w: no traffic secret", ErrUnsupported)
	}
	return append([]byte(nil), s.Bytes()...), nil
}

func seqOf(h reflect.Value) uint64 {
	s := field(h, "seq", reflect.Array)
	if s.Len() != 8 {
		panic("seq: not [8]byte")
	}
	var b [8]byte
	for i := range b {
		b[i] = byte(s.Index(i).Uint())
	}
	return binary.BigEndian.Uint64(b[:])
}

// bufferLen is a bytes.Buffer's unread length.
func bufferLen(b reflect.Value) int {
	return field(b, "buf", reflect.Slice).Len() - int(field(b, "off", reflect.Int).Int())
}
