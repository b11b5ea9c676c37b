//go:build linux

package proxy

import (
	"bytes"
	"net"
	"runtime"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/policy"
)

// TestIdleConnHeap: an idle HTTP/1.1 keep-alive connection on the event
// loops -- one that has had its exchange and now waits -- holds no
// buffer and no exchange (proxy/evloop's doc, "Memory"): the heap the
// process keeps for each of many such connections stays under
// idleConnHeapMax, where a connection that kept its 16 KiB read buffer,
// or its exchange and output buffer, would not. The clients are raw
// sockets (no Go object per connection on the client side), and the
// heap is read after a collection, before and after they connect; the
// figure is what e2e/bench/idle.sh measures as RSS, without the
// runtime's own slack.
func TestIdleConnHeap(t *testing.T) {
	const idleConnHeapMax = 1024 // bytes per idle connection
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	n := 2000
	if m := (int(lim.Cur) - 256) / 2; m < n { // (a client and a server descriptor each)
		n = m
	}
	if n < 500 {
		t.Skipf("RLIMIT_NOFILE %d is too low for this test", lim.Cur)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 128)
	be := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}
	go be.Serve(ln)
	defer be.Shutdown()
	h := startEngine(t, policy.EngineLoops, []string{ln.Addr().String()}, Options{}, nil)
	defer h.close()
	sa := sockaddr(t, h.addr)

	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	buf := make([]byte, 4096)
	req := []byte("GET /idle HTTP/1.1\r\nHost: example.com\r\n\r\n")
	open := func() int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Connect(fd, sa); err != nil {
			unix.Close(fd)
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, req); err != nil {
			t.Fatal(err)
		}
		readResponse(t, fd, buf)
		return fd
	}
	// The loops' first exchanges make what they keep for all (free
	// lists, tables): not counted.
	for range 64 {
		fds = append(fds, open())
	}
	before := liveHeap()
	for len(fds) < n+64 {
		fds = append(fds, open())
	}
	// Each connection's response was read whole, so its loop ended its
	// exchange (the last one's loop may be giving its buffers back as
	// the heap is read: at most a few of n).
	after := liveHeap()
	per := (int64(after) - int64(before)) / int64(n)
	t.Logf("%d idle connections: %d bytes of heap each (live heap %d -> %d)", n, per, before, after)
	if per > idleConnHeapMax {
		t.Errorf("an idle keep-alive connection keeps %d bytes of heap; want at most %d", per, idleConnHeapMax)
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func sockaddr(t *testing.T, addr string) unix.Sockaddr {
	t.Helper()
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	return sa
}

// readResponse reads one response with a Content-Length body from the
// blocking socket fd (buf holds it whole).
func readResponse(t *testing.T, fd int, buf []byte) {
	t.Helper()
	got := 0
	for {
		m, err := unix.Read(fd, buf[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			t.Fatalf("reading the response: %d %v (%q)", m, err, buf[:got])
		}
		got += m
		b := buf[:got]
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i < 0 {
			continue
		}
		if !bytes.HasPrefix(b, []byte("HTTP/1.1 200 ")) {
			t.Fatalf("response %q", b)
		}
		j := bytes.Index(bytes.ToLower(b[:i]), []byte("\r\ncontent-length: "))
		if j < 0 {
			t.Fatalf("no Content-Length in %q", b[:i])
		}
		k := j + len("\r\ncontent-length: ")
		e := bytes.IndexByte(b[k:], '\r')
		cl, err := strconv.Atoi(string(b[k : k+e]))
		if err != nil {
			t.Fatal(err)
		}
		if got >= i+4+cl {
			return
		}
	}
}
