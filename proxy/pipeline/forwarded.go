package pipeline

import (
	"bytes"
	"net/netip"
	"unsafe"
)

// bytesView returns b as a string without copying. Only for calls that do
// not keep the string: netip.ParseAddr keeps it only in its error, which we
// drop, and interns zones by copying.
func bytesView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Trusted reports whether addr is inside one of the prefixes.
func Trusted(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ClientFromXFF returns the real client address when the direct peer is a
// trusted proxy: walking X-Forwarded-For from the right, the first address
// that is not itself trusted. If every entry is trusted the leftmost one is
// the client. Unparseable entries stop the walk and the peer is used, so a
// forged header cannot smuggle an arbitrary address.
func ClientFromXFF(prefixes []netip.Prefix, peer netip.Addr, xff []byte) netip.Addr {
	client := peer
	for len(xff) > 0 {
		i := bytes.LastIndexByte(xff, ',')
		part := bytes.TrimSpace(xff[i+1:])
		if i < 0 {
			xff = nil
		} else {
			xff = xff[:i]
		}
		a, err := netip.ParseAddr(bytesView(part))
		if err != nil {
			return peer
		}
		client = a.Unmap()
		if !Trusted(prefixes, client) {
			return client
		}
	}
	return client
}
