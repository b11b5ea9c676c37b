// Package logwriter is a bounded, non-blocking writer of log lines: the
// callers append whole lines to a buffer, and one goroutine of its own
// writes them to the output. A caller never waits for the output. When a
// reader stops reading (a stuck pipe on stdout, a FIFO nobody opens for
// reading, a full disk that blocks), the writer goroutine blocks in its
// write, the buffer fills, and further lines are dropped and counted --
// the process keeps serving. sentry uses one for the access log (package
// proxy) and one for its own log (cmd/sentry).
//
// # Structure
//
// Two byte slices, double-buffered: callers append to the pending one
// under a short mutex (Writer.mu, a leaf lock); the goroutine swaps it
// with the one it has just written, out of the lock, and writes the batch
// in chunks of at most Chunk bytes that end at a line boundary (PIPE_BUF,
// 4096 bytes, by default: the kernel writes at most that much to a pipe
// atomically, so another process's lines, or another writer's to the same
// pipe, never land inside one of ours). A line longer than Chunk goes in
// one write of its own. Callers append whole lines (ending in '\n'); a
// line that does not fit what is left of Size is dropped whole, never cut.
// Nothing is allocated per line: the two slices start at 64 KiB, grow only
// to the largest batch, and are reused.
//
// # Invariants
//
//   - Order: lines are written in the order their Write calls took the
//     lock; a dropped line leaves a gap, never a reorder.
//   - Bound: at most Size bytes wait (plus the batch being written).
//   - A caller holds Writer.mu only to copy its line: no I/O, no channel
//     send that can block (the wake-up is a non-blocking send on a
//     one-slot channel), no callback.
//   - The goroutine is owned: New starts it, Close stops it. Close flushes
//     what is buffered and returns once it is written or its timeout has
//     passed; the goroutine exits when the output accepts the last batch
//     or, for an output the writer owns (one that implements io.Closer),
//     when Close closes it and so makes the stuck write fail. A write blocked on a descriptor in
//     blocking mode that the process does not own (a stuck stdout) cannot
//     be interrupted: the goroutine stays in it until the reader comes
//     back or the process exits, and Close returns after its timeout.
//
// # Crash safety
//
// Decision: what is buffered is lost on a crash (a panic, SIGKILL, an OOM
// kill): with a live reader that is the lines of the last moments, well
// under a millisecond's worth; with a stuck reader, up to Size bytes --
// which a synchronous writer would not have written either, since it would
// have been blocked. A graceful stop flushes (Close), bounded by its
// timeout so that a stuck reader cannot hold the exit. The Go runtime's
// own panic and fatal-error output goes to fd 2 directly, not through
// this buffer, so a crash's own report is never lost here.
package logwriter

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults.
const (
	DefaultSize  = 1 << 20 // bytes waiting before lines are dropped
	DefaultChunk = 4096    // PIPE_BUF on Linux: the largest atomic pipe write
	initialCap   = 64 << 10
)

// Options configure a Writer; the zero value takes the defaults.
type Options struct {
	// Size bounds the bytes waiting to be written; a line that does not
	// fit is dropped. Default DefaultSize.
	Size int
	// Chunk is the most bytes one write call carries (always whole lines;
	// a longer line goes alone). Default DefaultChunk.
	Chunk int
	// Now is the clock for Stalled. Default time.Now.
	Now func() time.Time
}

// Writer is a bounded, non-blocking line writer. It implements io.Writer:
// Write never blocks on the output and always reports success (a dropped
// line is counted, not returned as an error, since a logger has nothing
// better to do with one).
//
// An output that implements io.Closer belongs to the Writer: it is closed
// when SetOutput replaces it (after any write to it in progress) and when
// the Writer stops. Wrap one that is not the Writer's to hide its Close:
// New(struct{ io.Writer }{os.Stdout}, …).
type Writer struct {
	size, chunk int
	now         func() time.Time

	mu struct {
		sync.Mutex
		buf   []byte    // pending whole lines
		taken uint64    // bytes accepted since New
		out   io.Writer // the output of the lines appended from now on
		// cuts are the SetOutput calls since the goroutine last took the
		// buffer: from buf[cut.at] on, lines go to cut.out.
		cuts   []cut
		closed bool
	}
	kick chan struct{} // one slot: "there is something to write"
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the goroutine returns

	spare  []byte                 // the goroutine's: the buffer it wrote last
	cur    io.Writer              // the goroutine's: the output it writes to
	curBox atomic.Pointer[outBox] // cur, for Close to unblock
	// abandoned: Close timed out; what is left is dropped (counted as
	// failed), not written, so that a later output as stuck as the last
	// cannot hold the goroutine.
	abandoned atomic.Bool
	cuts      []cut        // the goroutine's: spare for mu.cuts
	since     atomic.Int64 // unix ns when the write in progress started; 0: none
	full      atomic.Uint64
	failed    atomic.Uint64
	written   atomic.Uint64
	pending   atomic.Int64  // bytes in mu.buf (for scrapes without the lock)
	settled   atomic.Uint64 // bytes the goroutine is done with (written or failed)
}

// New starts a Writer on out; its goroutine runs until Close.
func New(out io.Writer, o Options) *Writer {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Writer{size: o.Size, chunk: o.Chunk, now: o.Now,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.mu.out, w.cur = out, out
	w.curBox.Store(&outBox{out})
	// Room for the usual batch from the start: no allocation per line in
	// steady state, and none at all below initialCap bytes per batch.
	n := min(o.Size, initialCap)
	w.mu.buf, w.spare = make([]byte, 0, n), make([]byte, 0, n)
	go w.run()
	return w
}

// Write appends p, one or more whole lines, to the buffer, or drops it
// whole when it does not fit (counted in Stats.Full). It never blocks on
// the output and always returns len(p), nil. After Close, p is discarded
// uncounted. It allocates only while the buffer grows past its initial
// size.
func (w *Writer) Write(p []byte) (int, error) {
	w.TryWrite(p)
	return len(p), nil
}

// TryWrite is Write that tells whether p was kept: false when the buffer
// had no room for it (counted in Stats.Full) or the Writer is closed.
func (w *Writer) TryWrite(p []byte) bool {
	w.mu.Lock()
	switch {
	case w.mu.closed:
		w.mu.Unlock()
		return false
	case len(w.mu.buf)+len(p) > w.size:
		w.mu.Unlock()
		w.full.Add(uint64(max(1, bytes.Count(p, nl))))
		return false
	}
	w.mu.buf = append(w.mu.buf, p...)
	w.mu.taken += uint64(len(p))
	w.pending.Store(int64(len(w.mu.buf)))
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return true
}

var nl = []byte{'\n'}

// SetOutput makes out the output of the lines written from now on; the
// lines already buffered still go to the output they were written for.
// The output it replaces is closed, if it is an io.Closer, once the
// goroutine has written those lines to it, so a reopen after log rotation
// neither cuts a line nor moves one to the new file.
func (w *Writer) SetOutput(out io.Writer) {
	w.mu.Lock()
	if w.mu.closed {
		w.mu.Unlock()
		w.closeOutput(out)
		return
	}
	w.mu.cuts = append(w.mu.cuts, cut{at: len(w.mu.buf), out: out})
	w.mu.out = out
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close stops taking lines, flushes what is buffered and stops the
// goroutine. It returns once the buffer is written, or after timeout if
// the output is stuck; then it closes the output if it is an io.Closer,
// which ends a write blocked on a pollable file (a FIFO, a socket). It reports
// whether everything was flushed. Close is idempotent.
func (w *Writer) Close(timeout time.Duration) bool {
	w.mu.Lock()
	if !w.mu.closed {
		w.mu.closed = true
		close(w.stop)
	}
	w.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
	}
	// Stuck: unblock a pollable output; the goroutine then drops the rest
	// (and closes the outputs it has not reached yet).
	w.abandoned.Store(true)
	w.closeOutput(w.curBox.Load().w)
	return false
}

// Sync waits until every line accepted before the call has been written
// (or refused by the output), at most timeout, and reports whether it
// was. It polls; it is for tests and tools, not for a serving path.
func (w *Writer) Sync(timeout time.Duration) bool {
	w.mu.Lock()
	target := w.mu.taken
	w.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for w.settled.Load() < target {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
	return true
}

// Done is closed when the goroutine has returned.
func (w *Writer) Done() <-chan struct{} { return w.done }

func (w *Writer) closeOutput(out io.Writer) {
	if c, ok := out.(io.Closer); ok {
		_ = c.Close()
	}
}

// Stalled is how long the write in progress has been blocked (0 when the
// goroutine is not writing). A reader that stopped reading shows as a
// Stalled that grows.
func (w *Writer) Stalled() time.Duration {
	s := w.since.Load()
	if s == 0 {
		return 0
	}
	return max(0, time.Duration(w.now().UnixNano()-s))
}

// Stats are the writer's counters since New.
type Stats struct {
	Written  uint64 // lines written to the output
	Full     uint64 // lines dropped: the buffer was full
	Failed   uint64 // lines lost: the output returned an error
	Buffered int64  // bytes waiting now
}

// Stats returns the counters (each read atomically; together, nearly
// consistent).
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Full: w.full.Load(), Failed: w.failed.Load(), Buffered: w.pending.Load()}
}

type outBox struct{ w io.Writer }

// cut is a SetOutput in the buffer: from byte at on, lines go to out.
type cut struct {
	at  int
	out io.Writer
}

func (w *Writer) run() {
	defer close(w.done)
	for {
		select {
		case <-w.kick:
		case <-w.stop:
		}
		for {
			w.mu.Lock()
			batch, cuts, closed := w.mu.buf, w.mu.cuts, w.mu.closed
			w.mu.buf, w.mu.cuts = w.spare[:0], w.cuts[:0]
			w.pending.Store(0)
			w.mu.Unlock()
			if len(batch) == 0 && len(cuts) == 0 {
				w.spare = batch
				if closed {
					w.closeOutput(w.cur)
					return
				}
				break
			}
			prev := 0
			for _, c := range cuts {
				w.flush(w.cur, batch[prev:c.at])
				w.closeOutput(w.cur)
				w.cur, prev = c.out, c.at
				w.curBox.Store(&outBox{c.out})
			}
			w.flush(w.cur, batch[prev:])
			clear(cuts)
			w.spare, w.cuts = batch[:0], cuts[:0]
		}
	}
}

// flush writes batch in chunks of whole lines, at most w.chunk bytes each
// (a longer line alone).
func (w *Writer) flush(out io.Writer, batch []byte) {
	for len(batch) > 0 {
		n := len(batch)
		if n > w.chunk {
			if i := bytes.LastIndexByte(batch[:w.chunk], '\n'); i >= 0 {
				n = i + 1
			} else if i := bytes.IndexByte(batch[w.chunk:], '\n'); i >= 0 {
				n = w.chunk + i + 1
			}
		}
		c := batch[:n]
		batch = batch[n:]
		lines := uint64(max(1, bytes.Count(c, nl)))
		if w.abandoned.Load() {
			w.settled.Add(uint64(n))
			w.failed.Add(lines)
			continue
		}
		w.since.Store(w.now().UnixNano())
		_, err := out.Write(c)
		w.since.Store(0)
		w.settled.Add(uint64(n))
		if err != nil {
			w.failed.Add(lines)
			continue
		}
		w.written.Add(lines)
	}
}

// Collector exports Writers' state at scrape time, one set of series per
// log name ("access", "process"):
//
//	sentry_log_lines_written_total{log}
//	sentry_log_lines_dropped_total{log,reason}  reason: buffer_full, write_error
//	sentry_log_buffered_bytes{log}
//	sentry_log_output_stalled_seconds{log}      how long the write in progress has been blocked
//
// A Writer that is nil (a log never turned on) exports nothing. Log names
// must be unique in a registry.
type Collector struct {
	logs []string
	get  []func() *Writer
}

var (
	descWritten = prometheus.NewDesc("sentry_log_lines_written_total", "Log lines the log's writer goroutine has written to its output.", []string{"log"}, nil)
	descDropped = prometheus.NewDesc("sentry_log_lines_dropped_total", "Log lines lost by the log's writer: buffer_full (the output did not keep up, or is stuck; the line was never buffered), write_error (the output refused it).", []string{"log", "reason"}, nil)
	descBuf     = prometheus.NewDesc("sentry_log_buffered_bytes", "Bytes of log lines waiting for the log's writer goroutine.", []string{"log"}, nil)
	descStalled = prometheus.NewDesc("sentry_log_output_stalled_seconds", "How long the log's current write to its output has been blocked (0: not writing). A reader that stopped reading shows as a value that keeps growing; serving is not affected.", []string{"log"}, nil)
)

// Add exports the Writer get returns, as log.
func (c *Collector) Add(log string, get func() *Writer) {
	c.logs = append(c.logs, log)
	c.get = append(c.get, get)
}

// Describe implements prometheus.Collector. It describes nothing: the
// Collector is unchecked, so that each owner of a log (the proxy its
// access log, cmd/sentry the process log) registers its own into one
// registry; their series differ by the log label.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for i, log := range c.logs {
		w := c.get[i]()
		if w == nil {
			continue
		}
		st := w.Stats()
		ch <- prometheus.MustNewConstMetric(descWritten, prometheus.CounterValue, float64(st.Written), log)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Full), log, "buffer_full")
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Failed), log, "write_error")
		ch <- prometheus.MustNewConstMetric(descBuf, prometheus.GaugeValue, float64(st.Buffered), log)
		ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, w.Stalled().Seconds(), log)
	}
}
