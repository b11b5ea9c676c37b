//go:build linux

package pipeline

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// loopAddr is a backend's address for the event loops.
type loopAddr struct{ sa unix.Sockaddr }

// LoopSockaddr returns the backend's address for connect(2); it is resolved
// once (backends are IP:port; DNS names are resolved by the pool).
func (u *Upstream) LoopSockaddr() (unix.Sockaddr, error) {
	if sa := u.sa.Load(); sa != nil {
		return sa.sa, nil
	}
	ap, err := netip.ParseAddrPort(u.Addr)
	if err != nil {
		ta, rerr := net.ResolveTCPAddr("tcp", u.Addr)
		if rerr != nil {
			return nil, rerr
		}
		ap = ta.AddrPort()
	}
	var sa unix.Sockaddr
	if a := ap.Addr().Unmap(); a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	u.sa.Store(&loopAddr{sa: sa})
	return sa, nil
}
