// Package freeport hands tests and the scenario runner a loopback address
// that nothing listens on, for a process or daemon that binds it later.
//
// The usual trick, listening on 127.0.0.1:0 and closing, returns a port from
// the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768–60999 on
// Linux). That range is also where every outgoing connection of every test
// running in parallel takes its source port, so between the close and the
// later bind another test's client can take it, and the bind fails with
// "address already in use". CI saw exactly that.
//
// Addr picks a random port below the ephemeral range instead, where the
// kernel never allocates on its own: only another caller of Addr (another
// test process) can take it, and it picks at random among ~12,000 ports. It
// still binds the port once to be sure nothing listens there now.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
)

// Below the kernel's ephemeral range (32768 and up on Linux) and above the
// ports services usually own.
const lo, hi = 20000, 32768

// Addr returns "127.0.0.1:PORT" for a port that was free a moment ago and
// is outside the range the kernel hands out by itself.
func Addr() (string, error) {
	var last error
	for range 64 {
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			last = err
			continue
		}
		ln.Close()
		return addr, nil
	}
	return "", fmt.Errorf("freeport: no free port in [%d, %d) after 64 tries: %w", lo, hi, last)
}
