// Package replayconn gives a connection back the bytes already read from
// it: the event loops hand a connection to fasthttp after reading its
// first bytes, and the h2c split reads the HTTP/2 preface before it knows
// which server takes the connection.
package replayconn

import (
	"net"
	"syscall"
)

// Conn reads Pre first, then from the connection under it.
type Conn struct {
	net.Conn
	Pre []byte
}

func (c *Conn) Read(b []byte) (int, error) {
	if len(c.Pre) > 0 {
		n := copy(b, c.Pre)
		c.Pre = c.Pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// SyscallConn and CloseWrite reach the socket under it (peer-gone checks,
// lingering close).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
