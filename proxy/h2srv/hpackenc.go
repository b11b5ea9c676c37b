package h2srv

import (
	"unsafe"

	"golang.org/x/net/http2/hpack"
)

// The response side of HPACK is stateless here: every field is a literal
// without indexing (its name indexed when the static table has it), and
// :status indexed when the static table has the code, as nginx encodes. No
// dynamic table entry is ever added, so a header block can be encoded
// whenever it is convenient (a stream's trailers while its data waits for
// window) and the encoder needs no lock order with the output. The cost is
// a few bytes per repeated field, against a state per connection that
// would also have to be shared by the event loops later.
//
// The table is empty, but its size is still part of the protocol: when
// the client lowers SETTINGS_HEADER_TABLE_SIZE below the size in force,
// the next header block must start with a Dynamic Table Size Update (RFC
// 7541 §4.2), and decoders such as nghttp2's refuse a block without one
// (COMPRESSION_ERROR). Conn tracks the size (encTable) and writeBlock
// puts the update (appendTableSize) in front of the first block it
// writes after the change.

// staticName maps a lower-case field name to its static-table index
// (RFC 7541 Appendix A): the names a response carries.
var staticName = map[string]uint8{
	"accept-charset": 15, "accept-encoding": 16, "accept-language": 17, "accept-ranges": 18,
	"accept": 19, "access-control-allow-origin": 20, "age": 21, "allow": 22,
	"authorization": 23, "cache-control": 24, "content-disposition": 25, "content-encoding": 26,
	"content-language": 27, "content-length": 28, "content-location": 29, "content-range": 30,
	"content-type": 31, "cookie": 32, "date": 33, "etag": 34, "expect": 35, "expires": 36,
	"from": 37, "host": 38, "if-match": 39, "if-modified-since": 40, "if-none-match": 41,
	"if-range": 42, "if-unmodified-since": 43, "last-modified": 44, "link": 45, "location": 46,
	"max-forwards": 47, "proxy-authenticate": 48, "proxy-authorization": 49, "range": 50,
	"referer": 51, "refresh": 52, "retry-after": 53, "server": 54, "set-cookie": 55,
	"strict-transport-security": 56, "transfer-encoding": 57, "user-agent": 58, "vary": 59,
	"via": 60, "www-authenticate": 61,
}

// appendInt appends v with an n-bit prefix whose high bits are first's
// (RFC 7541 §5.1).
func appendInt(b []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	v -= max
	for v >= 128 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendTableSize appends a Dynamic Table Size Update (RFC 7541 §6.3).
func appendTableSize(b []byte, size uint32) []byte {
	return appendInt(b, 0x20, 5, uint64(size))
}

// appendString appends s as an HPACK string literal, Huffman-coded when
// that is shorter.
func appendString(b []byte, s []byte) []byte {
	str := unsafe.String(unsafe.SliceData(s), len(s)) // read only, not kept
	if h := hpack.HuffmanEncodeLength(str); h < uint64(len(s)) {
		b = appendInt(b, 0x80, 7, h)
		return hpack.AppendHuffmanString(b, str)
	}
	b = appendInt(b, 0, 7, uint64(len(s)))
	return append(b, s...)
}

// appendStatus appends :status.
func appendStatus(b []byte, status int) []byte {
	switch status {
	case 200:
		return append(b, 0x80|8)
	case 204:
		return append(b, 0x80|9)
	case 206:
		return append(b, 0x80|10)
	case 304:
		return append(b, 0x80|11)
	case 400:
		return append(b, 0x80|12)
	case 404:
		return append(b, 0x80|13)
	case 500:
		return append(b, 0x80|14)
	}
	if status < 100 || status > 999 {
		status = 500
	}
	b = append(b, 0x08, 3) // literal without indexing, name :status (8)
	return append(b, byte('0'+status/100), byte('0'+status/10%10), byte('0'+status%10))
}

// appendField appends one field, its name lower-cased on the way (scratch
// holds the lower-case copy).
func appendField(b, scratch []byte, name, value []byte) ([]byte, []byte) {
	scratch = scratch[:0]
	for _, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		scratch = append(scratch, c)
	}
	if i, ok := staticName[string(scratch)]; ok {
		b = appendInt(b, 0, 4, uint64(i))
	} else {
		b = append(b, 0)
		b = appendString(b, scratch)
	}
	return appendString(b, value), scratch
}
