//go:build !linux

package proxy

import "net"

// startFast does nothing: the event loops (package proxy/evloop) exist on
// Linux only; elsewhere fasthttp serves every connection.
func (fe *frontend) startFast(ln net.Listener) (net.Listener, bool) { return ln, false }

// loopsInForce: no event loops outside Linux.
func loopsInForce(Engine, bool) (plain, tls, h2 bool) { return false, false, false }
