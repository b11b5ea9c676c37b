package logwriter

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate is an output that blocks every Write until released: a reader that
// stopped reading.
type gate struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  []int // size of each write call
	open    chan struct{}
	entered chan struct{} // one value per Write call that starts
}

func newGate(open bool) *gate {
	g := &gate{open: make(chan struct{}), entered: make(chan struct{}, 1024)}
	if open {
		close(g.open)
	}
	return g
}

func (g *gate) Write(p []byte) (int, error) {
	g.entered <- struct{}{}
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, len(p))
	return g.buf.Write(p)
}

func (g *gate) String() string { g.mu.Lock(); defer g.mu.Unlock(); return g.buf.String() }

func line(i int) []byte { return fmt.Appendf(nil, "line %04d\n", i) } // 10 bytes

// waitDone waits for the writer's goroutine to return.
func waitDone(t *testing.T, w *Writer) {
	t.Helper()
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the writer's goroutine did not return")
	}
}

// TestOrderAndFlushOnClose: every line written, in order, once Close has
// returned true; the goroutine has returned.
func TestOrderAndFlushOnClose(t *testing.T) {
	g := newGate(true)
	w := New(g, Options{Chunk: 64})
	var want strings.Builder
	for i := range 1000 {
		w.Write(line(i))
		want.Write(line(i))
	}
	if !w.Close(5 * time.Second) {
		t.Fatal("Close did not flush")
	}
	waitDone(t, w)
	if got := g.String(); got != want.String() {
		t.Fatalf("output differs: %d bytes, want %d", len(got), want.Len())
	}
	for _, n := range g.writes {
		if n > 64 {
			t.Fatalf("a write of %d bytes, chunk 64", n)
		}
		if n%10 != 0 {
			t.Fatalf("a write of %d bytes cut a 10-byte line", n)
		}
	}
	if st := w.Stats(); st.Written != 1000 || st.Full != 0 || st.Failed != 0 || st.Buffered != 0 {
		t.Fatalf("stats %+v", st)
	}
	// After Close, lines are discarded uncounted.
	w.Write(line(0))
	if st := w.Stats(); st.Written != 1000 || st.Full != 0 {
		t.Fatalf("a line after Close counted: %+v", st)
	}
}

// TestFullBufferDrops: with the output stuck, Write returns at once; the
// buffer holds Size bytes of whole lines, the rest is dropped and counted;
// once the reader is back, what was kept is written in order.
func TestFullBufferDrops(t *testing.T) {
	g := newGate(false)
	now := time.Unix(100, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	w := New(g, Options{Size: 100, Chunk: 4096, Now: clock})
	w.Write(line(0)) // the goroutine takes it and blocks in the output
	<-g.entered
	mu.Lock()
	now = now.Add(3 * time.Second)
	mu.Unlock()
	if s := w.Stalled(); s != 3*time.Second {
		t.Fatalf("Stalled %v, want 3s", s)
	}
	start := time.Now()
	for i := 1; i <= 100; i++ {
		w.Write(line(i))
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("100 writes took %v with the output stuck", el)
	}
	// Lines 1..10 fit the 100 bytes; 11..100 are dropped.
	if st := w.Stats(); st.Full != 90 || st.Buffered != 100 {
		t.Fatalf("stats %+v, want 90 dropped and 100 bytes buffered", st)
	}
	close(g.open)
	if !w.Close(5 * time.Second) {
		t.Fatal("Close did not flush")
	}
	var want strings.Builder
	for i := 0; i <= 10; i++ {
		want.Write(line(i))
	}
	if got := g.String(); got != want.String() {
		t.Fatalf("got %q, want %q", got, want.String())
	}
	if s := w.Stalled(); s != 0 {
		t.Fatalf("Stalled %v after the reader came back", s)
	}
}

// TestLongLineAlone: a line longer than Chunk goes in one write of its own,
// whole; shorter ones around it are grouped.
func TestLongLineAlone(t *testing.T) {
	g := newGate(false)
	w := New(g, Options{Chunk: 16})
	w.Write([]byte("a\n"))
	<-g.entered // the goroutine is stuck on "a\n"; the rest is one batch
	long := strings.Repeat("x", 40) + "\n"
	w.Write([]byte("b\n"))
	w.Write([]byte(long))
	w.Write([]byte("c\n"))
	close(g.open)
	w.Close(5 * time.Second)
	if got, want := g.String(), "a\nb\n"+long+"c\n"; got != want {
		t.Fatalf("got %q", got)
	}
	if want := []int{2, 2, 41, 2}; fmt.Sprint(g.writes) != fmt.Sprint(want) {
		t.Fatalf("writes %v, want %v", g.writes, want)
	}
}

// TestCloseStuckPollable: Close with a reader that never comes back returns
// after its timeout; it closes the output (an io.Closer, the writer's), which ends a write
// blocked on a pipe (pollable), so the goroutine returns: nothing leaks.
func TestCloseStuckPollable(t *testing.T) {
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	base := runtime.NumGoroutine()
	w := New(wr, Options{Size: 1 << 20})
	big := bytes.Repeat([]byte("y"), 1023)
	big = append(big, '\n')
	for range 512 { // 512 KiB: more than a pipe holds
		w.Write(big)
	}
	// The goroutine is blocked: the pipe is full.
	deadline := time.Now().Add(5 * time.Second)
	for w.Stalled() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w.Stalled() == 0 {
		t.Fatal("the writer never blocked on the full pipe")
	}
	start := time.Now()
	if w.Close(200 * time.Millisecond) {
		t.Fatal("Close reported a flush to a reader that never read")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v with a 200ms timeout", el)
	}
	waitDone(t, w)
	if st := w.Stats(); st.Failed == 0 {
		t.Fatalf("no lines counted lost: %+v", st)
	}
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Fatalf("%d goroutines, %d before", n, base)
	}
}

// TestSetOutput: lines after SetOutput go to the new output; the old one
// is closed (an io.Closer: the writer's) only after the write to it in progress is done.
func TestSetOutput(t *testing.T) {
	a := &closeRecorder{gate: newGate(false)}
	b := &closeRecorder{gate: newGate(true)}
	w := New(a, Options{})
	w.Write([]byte("to a\n"))
	<-a.entered // stuck in a write to a
	w.SetOutput(b)
	w.Write([]byte("to b\n"))
	if a.isClosed() {
		t.Fatal("a closed during its write")
	}
	close(a.open)
	if !w.Close(5 * time.Second) {
		t.Fatal("Close did not flush")
	}
	if a.String() != "to a\n" || b.String() != "to b\n" {
		t.Fatalf("a %q, b %q", a.String(), b.String())
	}
	if !a.isClosed() || !b.isClosed() {
		t.Fatalf("closed: a %v, b %v", a.isClosed(), b.isClosed())
	}
}

type closeRecorder struct {
	*gate
	mu sync.Mutex
	c  bool
}

func (c *closeRecorder) Close() error { c.mu.Lock(); c.c = true; c.mu.Unlock(); return nil }
func (c *closeRecorder) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// TestWriteErrorCounted: lines the output refuses are counted as failed.
func TestWriteErrorCounted(t *testing.T) {
	w := New(errWriter{}, Options{})
	w.Write([]byte("a\nb\n"))
	w.Write([]byte("c\n"))
	w.Close(5 * time.Second)
	if st := w.Stats(); st.Failed != 3 || st.Written != 0 {
		t.Fatalf("stats %+v, want 3 failed", st)
	}
}

type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestWriteAllocs: a line costs no allocation once the buffer has grown.
func TestWriteAllocs(t *testing.T) {
	w := New(io.Discard, Options{})
	defer w.Close(time.Second)
	l := line(1)
	for range 1000 {
		w.Write(l)
	}
	if n := testing.AllocsPerRun(1000, func() { w.Write(l) }); n != 0 {
		t.Fatalf("%v allocs per Write", n)
	}
}

func BenchmarkWrite(b *testing.B) {
	w := New(io.Discard, Options{})
	defer w.Close(time.Second)
	l := line(1)
	b.ReportAllocs()
	for b.Loop() {
		w.Write(l)
	}
}

// TestCloseStuckThenStuckAgain: Close times out on a stuck pipe while a
// SetOutput to a second stuck pipe waits behind it: once the first write
// fails, the rest is dropped, not written to the second, and the
// goroutine returns.
func TestCloseStuckThenStuckAgain(t *testing.T) {
	var files []*os.File
	pipe := func() *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, r)
		return w
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	w := New(pipe(), Options{Size: 1 << 20})
	big := append(bytes.Repeat([]byte("z"), 1023), '\n')
	for range 256 { // 256 KiB: more than a pipe holds
		w.Write(big)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Stalled() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	second := pipe()
	w.SetOutput(second)
	for range 256 {
		w.Write(big)
	}
	if w.Close(200 * time.Millisecond) {
		t.Fatal("Close reported a flush")
	}
	waitDone(t, w)
	if _, err := second.Write([]byte("x")); err == nil {
		t.Fatal("the second output was left open")
	}
}
