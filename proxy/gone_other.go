//go:build !linux

package proxy

import "net"

// watchGone is not available here: a waiting request learns that its
// client left only after the decision (connAlive).
func watchGone(net.Conn) (<-chan struct{}, func(), bool) { return nil, nil, false }
