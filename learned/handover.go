package learned

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// HandoverFile is the name under which the old process passes its end of
// the handover socket to the new one (tableflip's Fds.AddFile and File).
const HandoverFile = "sentry-learned-state"

// Handover timing.
const (
	// InflightEvery is how often a draining process reports its
	// requests in flight.
	InflightEvery = 25 * time.Millisecond
	// StaleAfter: a report older than this counts as none (the old
	// process stopped reporting without closing).
	StaleAfter = time.Second
	// RequestTimeout bounds the new process's wait for the document.
	RequestTimeout = 5 * time.Second
)

// message is one line of the handover that is not the document: one of
// want (with version), failed, inflight (null in the others).
type message struct {
	Want     string           `json:"want,omitempty"`
	Version  int              `json:"version,omitempty"`
	Failed   string           `json:"failed,omitempty"`
	Inflight map[string]int64 `json:"inflight"`
}

// Giver is the old process's end of a handover.
type Giver struct {
	conn     net.Conn
	take     func() *Document
	inflight func() map[string]int64
	peer     func(map[string]int64)
	every    time.Duration

	wmu  sync.Mutex // one line at a time
	stop chan struct{}
	once sync.Once
	read chan struct{} // closed when the reader ends
	send sync.WaitGroup

	mu      sync.Mutex
	failed  string // the new process's reason to fail
	gave    bool   // the document was sent
	closed  bool   // Close has begun: no more reports start
	failing bool   // Failure has begun: its read deadline is not a stale report
}

// NewGiver serves the handover on conn: when the new process asks, it
// sends take()'s document, then inflight()'s counts every interval
// (InflightEvery when ≤ 0) until Close; it passes the new process's own
// counts to peer as they come (nil when they end or grow stale, like
// Taker.Follow's set); it records a failure the new process reports
// (Failure). It owns conn.
func NewGiver(conn net.Conn, take func() *Document, inflight func() map[string]int64, peer func(map[string]int64), every time.Duration) *Giver {
	if every <= 0 {
		every = InflightEvery
	}
	if peer == nil {
		peer = func(map[string]int64) {}
	}
	g := &Giver{conn: conn, take: take, inflight: inflight, peer: peer, every: every, stop: make(chan struct{}), read: make(chan struct{})}
	go g.reader()
	return g
}

func (g *Giver) reader() {
	defer close(g.read)
	defer g.peer(nil)
	r := bufio.NewReader(g.conn)
	var last time.Time
	for {
		if !last.IsZero() {
			// A report older than StaleAfter counts as none.
			_ = g.conn.SetReadDeadline(time.Now().Add(StaleAfter))
		}
		line, err := readLine(r, MaxSize)
		if errors.Is(err, os.ErrDeadlineExceeded) && !last.IsZero() && g.open() {
			g.peer(nil)
			last = time.Time{}
			_ = g.conn.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			return
		}
		var m message
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch {
		case m.Inflight != nil:
			g.peer(m.Inflight)
			last = time.Now()
		case m.Failed != "":
			g.mu.Lock()
			g.failed = m.Failed
			g.mu.Unlock()
		case m.Want == Format:
			g.give()
		}
	}
}

// give sends the document once, then starts the in-flight reports.
func (g *Giver) give() {
	g.mu.Lock()
	again := g.gave || g.closed
	g.gave = true
	g.mu.Unlock()
	if again {
		return
	}
	d := g.take()
	g.wmu.Lock()
	err := Encode(g.conn, d)
	g.wmu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil || g.closed {
		return
	}
	g.send.Add(1)
	go func() {
		defer g.send.Done()
		t := time.NewTicker(g.every)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
			if g.line(message{Inflight: g.inflight()}) != nil {
				return
			}
		}
	}()
}

func (g *Giver) line(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	_ = g.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err = g.conn.Write(append(b, '\n'))
	return err
}

// open tells whether Close has not begun.
func (g *Giver) open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.closed && !g.failing
}

// Failure waits up to wait for the reason the new process gave for
// failing, closes the handover, and returns the reason ("" if none came).
// For the old process once its upgrade failed.
func (g *Giver) Failure(wait time.Duration) string {
	g.mu.Lock()
	g.failing = true
	g.mu.Unlock()
	_ = g.conn.SetReadDeadline(time.Now().Add(wait))
	select {
	case <-g.read:
	case <-time.After(wait + 100*time.Millisecond):
	}
	g.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// Close stops the reports, sends a last one of zero (the old process's
// requests are done: it calls Close after its drain) and closes the
// socket. Safe to call more than once.
func (g *Giver) Close() {
	g.once.Do(func() {
		g.mu.Lock()
		g.closed = true
		gave := g.gave
		g.mu.Unlock()
		close(g.stop)
		g.send.Wait()
		if gave {
			_ = g.line(message{Inflight: map[string]int64{}})
		}
		g.conn.Close()
		<-g.read
	})
}

// Taker is the new process's end of a handover.
type Taker struct {
	conn net.Conn
	r    *bufio.Reader
}

// Request asks the old process on conn for its document and waits for it
// up to timeout (RequestTimeout when ≤ 0). On error the caller starts
// without it; t is still usable for Fail.
func Request(conn net.Conn, timeout time.Duration) (t *Taker, d *Document, err error) {
	if timeout <= 0 {
		timeout = RequestTimeout
	}
	t = &Taker{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	b, _ := json.Marshal(message{Want: Format, Version: Version})
	_ = conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return t, nil, fmt.Errorf("asking for the learned state: %w", err)
	}
	line, err := readLine(t.r, MaxSize)
	if err != nil {
		return t, nil, fmt.Errorf("reading the learned state: %w", err)
	}
	d, err = Decode(line)
	return t, d, err
}

func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var out []byte
	for {
		part, err := r.ReadSlice('\n')
		out = append(out, part...)
		switch {
		case err == nil:
			return out, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(out) > max {
				return nil, fmt.Errorf("more than %d bytes", max)
			}
		default:
			return nil, err
		}
	}
}

// Follow exchanges in-flight counts with the old process until it closes
// the socket or done is closed: it sends inflight()'s every InflightEvery,
// and calls set with each of the old process's reports (the counts by
// app), with nil when a report is older than StaleAfter, and with nil at
// the end. It closes the socket when it returns.
func (t *Taker) Follow(done <-chan struct{}, inflight func() map[string]int64, set func(map[string]int64)) {
	defer t.conn.Close()
	defer set(nil)
	stopSend := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		tick := time.NewTicker(InflightEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopSend:
				return
			case <-tick.C:
			}
			b, err := json.Marshal(message{Inflight: inflight()})
			if err != nil {
				return
			}
			_ = t.conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := t.conn.Write(append(b, '\n')); err != nil {
				return
			}
		}
	}()
	defer func() { close(stopSend); <-sent }()
	lines := make(chan map[string]int64)
	go func() {
		defer close(lines)
		for {
			line, err := readLine(t.r, 1<<20)
			if err != nil {
				return
			}
			var m message
			if json.Unmarshal(line, &m) != nil || m.Inflight == nil {
				continue
			}
			select {
			case lines <- m.Inflight:
			case <-done:
				return
			}
		}
	}()
	stale := time.NewTimer(StaleAfter)
	defer stale.Stop()
	for {
		select {
		case <-done:
			t.conn.Close() // ends the reader
			for range lines {
			}
			return
		case m, ok := <-lines:
			if !ok {
				return
			}
			set(m)
			stale.Reset(StaleAfter)
		case <-stale.C:
			set(nil)
		}
	}
}

// Fail tells the old process why this one is about to exit before it is
// ready (at most a few KiB of it), and closes the socket.
func (t *Taker) Fail(reason string) {
	if len(reason) > 4096 {
		reason = reason[:4096] + "…"
	}
	b, _ := json.Marshal(message{Failed: reason})
	_ = t.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = t.conn.Write(append(b, '\n'))
	t.conn.Close()
}
