package replayconn

import (
	"io"
	"net"
	"testing"
)

// TestReplayThenConn: the replayed bytes come first, split across small
// reads, then the connection's own.
func TestReplayThenConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() { b.Write([]byte("world")); b.Close() }()
	c := &Conn{Conn: a, Pre: []byte("hello ")}
	var got []byte
	buf := make([]byte, 4)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "hello world" {
		t.Fatalf("read %q", got)
	}
	if _, err := c.SyscallConn(); err == nil {
		t.Error("a pipe has no syscall conn")
	}
	if err := c.CloseWrite(); err != nil {
		t.Errorf("CloseWrite on a pipe: %v", err)
	}
}
