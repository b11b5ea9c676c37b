package pipeline

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
)

// IDSource makes request IDs: a 64-bit random prefix fixed per process and a
// 64-bit counter, as 32 hex digits. Unique across restarts with overwhelming
// probability, no allocation, no lock.
type IDSource struct {
	Prefix [16]byte // hex of the random prefix
	N      atomic.Uint64
}

func NewIDSource() *IDSource {
	var r [8]byte
	_, _ = rand.Read(r[:])
	s := &IDSource{}
	hexEncode(s.Prefix[:], binary.BigEndian.Uint64(r[:]))
	s.N.Store(binary.BigEndian.Uint64(r[:]) >> 40) // start at a random point too
	return s
}

const hexDigits = "0123456789abcdef"

func hexEncode(dst []byte, v uint64) {
	for i := 15; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// append appends a fresh ID to dst.
func (s *IDSource) append(dst []byte) []byte {
	var b [32]byte
	copy(b[:16], s.Prefix[:])
	hexEncode(b[16:], s.N.Add(1))
	return append(dst, b[:]...)
}
