//go:build !linux

package proxy

import (
	"context"
	"net"
)

// fastFront is the event-loop front end, which exists on Linux only;
// elsewhere fasthttp serves every connection.
type fastFront struct{}

func (fe *frontend) startFast(ln net.Listener) (net.Listener, bool) { return ln, false }

func (ff *fastFront) shutdown(context.Context) {}

func (ff *fastFront) counts() (served, handed uint64) { return 0, 0 }
func (ff *fastFront) illegalTransitions() uint64      { return 0 }
