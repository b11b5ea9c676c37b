package proxy

import (
	"crypto/tls"
	"net"
	"syscall"
)

// connAlive reports whether the client is still connected: a non-blocking
// MSG_PEEK that reads 0 bytes means the peer closed. Pipelined bytes waiting
// in the socket count as alive, even with a FIN behind them. Used only
// after a request waited for admission, so its cost (one syscall) is off
// the common path. While a request is relayed on fasthttp's HTTP/1.1
// path, the FIN watch (fin_linux.go) applies another policy: any FIN is
// the client leaving, pipelined bytes or not.
func connAlive(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	alive := true
	var buf [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if n == 0 && err == nil {
			alive = false
		}
		return true // never wait
	})
	return alive
}
