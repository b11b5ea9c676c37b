package main

import (
	"net"
	"syscall"
)

// stopListening takes the socket under ln out of the LISTEN state for every
// descriptor that shares it: on Linux, shutdown(2) on a listening socket
// does that, so new connections are refused and blocked Accepts return.
//
// This matters under tableflip: the upgrader keeps a duplicate of every
// listener's descriptor (to hand it to the next process), and has no way to
// drop one. Closing our copy alone would leave the port bound and the kernel
// completing handshakes that no one accepts. Only for listeners the policy
// removed, or on a final stop; never on an upgrade, where the next process
// serves the same socket.
func stopListening(ln net.Listener) bool {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_RD) }); err != nil {
		return false
	}
	return serr == nil
}

// isListening reports whether ln's socket is in the LISTEN state
// (SO_ACCEPTCONN). An inherited descriptor may not be: an earlier process
// stopped it when a reload removed its address.
func isListening(ln net.Listener) bool {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	v := 1
	_ = raw.Control(func(fd uintptr) {
		if n, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err == nil {
			v = n
		}
	})
	return v != 0
}
