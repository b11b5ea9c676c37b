//go:build !linux

package main

import "net"

// stopListening is a no-op outside Linux, where shutdown(2) does not take a
// listening socket out of the LISTEN state. A listener removed by a reload
// is closed, but the upgrader's duplicate keeps its port bound until the
// next upgrade or stop.
func stopListening(ln net.Listener) bool { return false }

// isListening cannot tell outside Linux; it assumes yes.
func isListening(ln net.Listener) bool { return true }
