//go:build !linux

package proxy

// startTLSLoops does nothing: the event loops exist on Linux only.
func (fe *frontend) startTLSLoops() {}
