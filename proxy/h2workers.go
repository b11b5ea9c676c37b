package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/proxy/h2srv"
)

// h2workers.go: the goroutines that run the streams of sentry's h2 server
// (h2own.go) through the request path (serveOwnStream, serveH2Stream).

// h2Workers runs streams on long-lived goroutines whose stacks have grown
// to what the request path needs (a goroutine per stream started small
// and grew its stack two or three times on the way down). Idle workers
// are a stack (the most recently parked runs next, its stack warm); one
// parked for longer than h2WorkerIdle is retired by a later dispatch,
// which finds the oldest at the bottom; stop (the front end's Shutdown)
// retires them all. A parked worker waits on its channel alone: a timer
// in that select cost 2.8% of the h2 path's CPU.
type h2Workers struct {
	serve   func(*ownStream) // the front end's serveOwnStream
	mu      sync.Mutex
	idle    []*h2Worker
	stopped bool
	live    atomic.Int32 // worker goroutines
}

type h2Worker struct {
	ch     chan *ownStream // nil: end
	parked int64           // when it went idle (Unix ns)
	d      *gdriver        // the exchange core's driver, made at its first use (ownStream.driver)
}

const h2WorkerIdle = 10 * time.Second

// run starts st on an idle worker, or a new one.
func (ws *h2Workers) run(st *ownStream) {
	ws.mu.Lock()
	var w *h2Worker
	if n := len(ws.idle); n > 0 {
		w = ws.idle[n-1]
		ws.idle[n-1] = nil
		ws.idle = ws.idle[:n-1]
		if len(ws.idle) > 0 && time.Now().UnixNano()-ws.idle[0].parked > int64(h2WorkerIdle) {
			ws.retireLocked()
		}
	}
	ws.mu.Unlock()
	if w != nil {
		w.ch <- st
		return
	}
	w = &h2Worker{ch: make(chan *ownStream, 1)}
	ws.live.Add(1)
	go ws.loop(w, st)
}

// retireLocked ends the workers parked for longer than h2WorkerIdle. The
// sends do not block: a parked worker's channel is empty.
func (ws *h2Workers) retireLocked() {
	limit := time.Now().UnixNano() - int64(h2WorkerIdle)
	k := 0
	for k < len(ws.idle) && ws.idle[k].parked < limit {
		ws.idle[k].ch <- nil
		k++
	}
	n := copy(ws.idle, ws.idle[k:])
	clear(ws.idle[n:])
	ws.idle = ws.idle[:n]
}

// stop ends the parked workers; the others end after their stream.
func (ws *h2Workers) stop() {
	ws.mu.Lock()
	ws.stopped = true
	for _, w := range ws.idle {
		w.ch <- nil
	}
	ws.idle = nil
	ws.mu.Unlock()
}

func (ws *h2Workers) loop(w *h2Worker, st *ownStream) {
	defer ws.live.Add(-1)
	h2GrowStack(0)
	for st != nil {
		st.w = w
		ws.serve(st)
		ws.mu.Lock()
		if ws.stopped {
			ws.mu.Unlock()
			return
		}
		w.parked = time.Now().UnixNano()
		ws.idle = append(ws.idle, w)
		ws.mu.Unlock()
		st = <-w.ch
	}
}

// serveOwnStream runs one stream and gives it back to its connection.
func (fe *frontend) serveOwnStream(st *ownStream) {
	defer st.oc.release(st)
	defer func() {
		if r := recover(); r != nil {
			st.oc.mu.Lock()
			st.oc.core.ResetStream(st.s, h2srv.InternalError)
			if st.phase != phEnded {
				st.setPhase(phEnded)
			}
			st.oc.kickLocked()
			st.oc.mu.Unlock()
			if r != http.ErrAbortHandler {
				fe.p.log.Named("h2").Error("panic serving a stream", "panic", r)
			}
		}
	}()
	fe.serveH2Stream(st)
}
