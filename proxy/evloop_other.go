//go:build !linux

package proxy

import "net"

// loopsAvailable: the event loops (package proxy/evloop) exist on Linux
// only (engine.go).
const loopsAvailable = false

// startFast does nothing: the event loops (package proxy/evloop) exist on
// Linux only; elsewhere fasthttp serves every connection.
func (fe *frontend) startFast(ln net.Listener) (net.Listener, bool) { return ln, false }
