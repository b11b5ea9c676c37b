//go:build !linux

package pipeline

// loopAddr is a backend's address for the event loops (Linux only).
type loopAddr struct{}
