package proxy

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
)

// idSource makes request IDs: a 64-bit random prefix fixed per process and a
// 64-bit counter, as 32 hex digits. Unique across restarts with overwhelming
// probability, no allocation, no lock.
type idSource struct {
	prefix [16]byte // hex of the random prefix
	n      atomic.Uint64
}

func newIDSource() *idSource {
	var r [8]byte
	_, _ = rand.Read(r[:])
	s := &idSource{}
	hexEncode(s.prefix[:], binary.BigEndian.Uint64(r[:]))
	s.n.Store(binary.BigEndian.Uint64(r[:]) >> 40) // start at a random point too
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
func (s *idSource) append(dst []byte) []byte {
	var b [32]byte
	copy(b[:16], s.prefix[:])
	hexEncode(b[16:], s.n.Add(1))
	return append(dst, b[:]...)
}
