package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Every address is on loopback, below the ephemeral range, and bindable.
func TestAddr(t *testing.T) {
	for range 20 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p < lo || p >= hi {
			t.Fatalf("%s: want 127.0.0.1 and a port in [%d, %d)", addr, lo, hi)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		ln.Close()
	}
}
