package proxy

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/h2srv"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// gdrive.go: the exchange core's blocking driver on a goroutine. It runs
// the loop every driver runs -- event in, action out -- with blocking
// I/O between the calls: a dial, a write, a read under the core's
// deadline, a wait for a batch run. It serves the h2 workers' streams
// the core covers (takesStream); the rest stay on serveCtx (h2.go).
//
// What the driver owns: the backend connection (gpool keeps it between
// exchanges), the deadlines (read and write deadlines at the core's
// Deadline and TermAt: no timer goroutine), the wait at
// max_conns_per_backend (gwaitPoll), the client's side (the stream's h2
// core: h2core.go). What the core owns is package exchange's doc.

// gwaitPoll is how often an exchange waiting for a connection at
// max_conns_per_backend looks again: a connection freed by the loops or
// fasthttp does not wake it.
const gwaitPoll = 2 * time.Millisecond

// gbufSize is the backend read buffer: a response head must fit in it
// (as on the loops), body bytes pass through it.
const gbufSize = backendHeaderBytes

var errGone = errors.New("client gone")

// gdriver is one goroutine's driver: an Exchange and what its steps
// use, kept and reused by an h2 worker (one per worker, so making an ID
// takes no lock).
type gdriver struct {
	ex   exchange.Exchange
	sc   exchange.Scratch
	rh   pipeline.RawHead
	hd   exchange.Head
	wake chanWaker

	// mu guards bc and gone against the stream's cut (interrupt), which
	// runs on another goroutine.
	mu   sync.Mutex
	bc   net.Conn           // the backend connection bound (nil: none)
	bu   *pipeline.Upstream // the backend bc counts against
	gone bool               // the client reset the stream
	intr func()             // interrupt, bound once

	buf     []byte // the backend's bytes: a head until whole, then body
	n       int
	dec     []byte // a chunked body decoded
	ct      pipeline.ChunkTracker
	chunked bool
	rid     []byte // the app's request-ID header name
	num     []byte
	date    []byte
	dateSec int64
	fields  []gfield
	cur     *ownStream // the stream being served (set under mu)

	// Response buffering (docs/buffering.md): once the client cannot
	// take the body as fast as the backend sends it, the body goes into
	// rb (under the process's budget), so that the backend is read to the
	// end and released; the client then takes it from rb at its pace.
	bud       *respbuf.Budget
	rb        respbuf.Buffer
	buffering bool
	out       []byte // what is read from rb for the client
	pend      []byte // of out, what the client has not taken yet

	// What waits for Finish: the body's last bytes (last), or the whole
	// head of a response without a body (held: status and fields, their
	// bytes in arena).
	last   []byte
	held   bool
	status int
	arena  []byte
	spans  []fieldSpan // each held field's name and value in arena
}

func newGdriver(env *exchange.Env, bud *respbuf.Budget) *gdriver {
	d := &gdriver{wake: make(chanWaker, 1), buf: make([]byte, gbufSize), bud: bud}
	d.ex.Init(env, &d.sc)
	d.intr = d.interrupt
	return d
}

// takesStream tells whether the core's driver serves st for app a, and
// fills d.hd with its neutral head: for an app the core relays (plain
// HTTP/1.1 backends at IP:port: LoopOK), a head the HTTP/1.1 path would
// serve (exchange.StreamHead). The body is the caller's to judge.
func (d *gdriver) takesStream(st *ownStream, a *pipeline.App, maxHeader int) bool {
	s := st.s
	if a == nil || !a.LoopOK || string(s.Method()) == "CONNECT" {
		return false
	}
	hd, ok := exchange.StreamHead(s, a, &d.rh, maxHeader)
	if !ok {
		return false
	}
	hd.TLS = st.isTLS()
	d.hd = hd
	return true
}

// serve runs the exchange of st (its head in d.hd, for app a) to its end;
// refused (not OutRelayed) says the driver refuses it before its decision
// (exchange.Refuse).
func (d *gdriver) serve(st *ownStream, a *pipeline.App, logs bool, refused pipeline.Outcome) {
	d.mu.Lock()
	d.gone, d.cur = false, st
	d.mu.Unlock()
	defer d.done()
	stop := st.afterCut(d.intr)
	defer stop()
	d.rid = append(d.rid[:0], a.ReqID...)
	ex := &d.ex
	var act exchange.Action
	if refused != pipeline.OutRelayed {
		act = ex.Refuse(a, &d.hd, st.peer(), refused, logs, time.Now())
	} else {
		act = ex.Start(a, &d.hd, st.peer(), d.wake, logs, time.Now())
	}
	for act != exchange.None {
		act = d.step(st, act)
	}
	ex.Trim(gbufSize) // (a body's request is not kept by an idle worker)
}

// step carries out one action and returns the next (None: the exchange
// is done).
func (d *gdriver) step(st *ownStream, act exchange.Action) exchange.Action {
	ex := &d.ex
	switch act {
	case exchange.Park:
		return d.park(st)
	case exchange.Connect:
		return d.connect(st)
	case exchange.Wait:
		return d.wait(st)
	case exchange.Send:
		return d.send()
	case exchange.Cut:
		d.drop()
		return ex.Terminate(time.Now())
	case exchange.Reply:
		d.drop()
		d.reply(st)
	case exchange.Finish:
		// Recorded before the response's last bytes go out (see reply):
		// they wait in d.last, rb, or, for a response without a body,
		// its whole head in d.held.
		d.release()
		ex.Done(time.Now())
		switch {
		case d.held:
			d.held = false
			st.coreReply(d.status, d.fields, nil)
		case d.buffering:
			d.unbuffer(st)
		case st.phase == phHead:
			st.coreData(d.last, true)
		}
		d.last = nil
		st.coreDrain()
	case exchange.Abort:
		d.drop()
		d.stopBuffering()
		gone := ex.Outcome() == pipeline.OutClientGone
		ex.Done(time.Now())
		if !gone {
			st.coreReset(h2srv.InternalError)
		}
	default:
		// (WriteHead, Forward: carried out where the read returns them.)
		panic("gdrive: unexpected action " + act.String())
	}
	return exchange.None
}

// park waits for the batch run's decision, or the client's reset.
func (d *gdriver) park(st *ownStream) exchange.Action {
	ex := &d.ex
	pend := ex.Pending()
	done := st.Done()
	for {
		select {
		case <-d.wake:
			if dec, ok := pend.Result(); ok {
				return ex.Resume(dec, &d.hd, time.Now())
			}
		case <-done:
			return ex.Abort(pipeline.OutClientGone)
		}
	}
}

// connect binds a connection to the core's Upstream: a kept one, or a new
// one (dialled within the connect timeout), or Capped.
func (d *gdriver) connect(st *ownStream) exchange.Action {
	d.drop() // (a retry's: the connection of the attempt that failed)
	ex := &d.ex
	u := ex.Upstream()
	now := time.Now()
	if c := connsOf(u).take(now); c != nil {
		if !d.bind(c) {
			return ex.Abort(pipeline.OutClientGone)
		}
		return ex.Bound(false, true, now)
	}
	if capped(ex.App(), u) {
		return ex.Capped(now)
	}
	ex.Bound(true, false, now)
	c, err := gdial(st, u, time.Duration(ex.App().Shared.Connect.Load()))
	now = time.Now()
	switch {
	case st.Err() != nil:
		if c != nil {
			closeConn(u, c)
		}
		return ex.Abort(pipeline.OutClientGone)
	case err != nil:
		return ex.ConnectFailed(err, now)
	}
	if !d.bind(c) {
		return ex.Abort(pipeline.OutClientGone)
	}
	if t := ex.TermAt(); t != 0 && now.UnixNano() >= t {
		if act := ex.Tick(now); act != exchange.None {
			return act
		}
	}
	return ex.Connected(now)
}

// wait waits, at max_conns_per_backend, for room under the cap (Bound
// with a new connection's connect) until the core's Deadline (Expire),
// or the client's reset.
func (d *gdriver) wait(st *ownStream) exchange.Action {
	ex := &d.ex
	u := ex.Upstream()
	t := time.NewTicker(gwaitPoll)
	defer t.Stop()
	done := st.Done()
	for {
		select {
		case <-done:
			return ex.Abort(pipeline.OutClientGone)
		case now := <-t.C:
			if connsOf(u).peek() || !capped(ex.App(), u) {
				return exchange.Connect // (the same attempt: connect takes it)
			}
			if dl := ex.Deadline(); dl != 0 && now.UnixNano() >= dl {
				return ex.Expire(now)
			}
		}
	}
}

// done ends the driver's hold on its stream.
func (d *gdriver) done() {
	d.mu.Lock()
	d.cur = nil
	d.mu.Unlock()
}

// bind makes c the exchange's backend connection; false if the client
// went meanwhile (c is closed).
func (d *gdriver) bind(c net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone {
		closeConn(d.ex.Upstream(), c)
		return false
	}
	d.bc, d.bu = c, d.ex.Upstream()
	return true
}

// interrupt is the stream's cut: a blocked read or write on the backend
// returns at once.
func (d *gdriver) interrupt() {
	d.mu.Lock()
	if d.cur == nil || d.cur.Err() == nil {
		// A cut of a stream served before (the cut runs on a goroutine
		// of its own): not this one's.
		d.mu.Unlock()
		return
	}
	d.gone = true
	if d.bc != nil {
		_ = d.bc.SetDeadline(time.Unix(1, 0))
	}
	d.mu.Unlock()
}

// setDeadline sets the backend connection's deadlines to the core's
// next: the earlier of Deadline and TermAt (none when neither is set),
// unless the client went (the interrupt's deadline stays).
func (d *gdriver) setDeadline() {
	ex := &d.ex
	dl := ex.Deadline()
	if t := ex.TermAt(); t != 0 && (dl == 0 || t < dl) {
		dl = t
	}
	var at time.Time
	if dl != 0 {
		at = time.Unix(0, dl)
	}
	d.mu.Lock()
	if !d.gone {
		_ = d.bc.SetDeadline(at)
	}
	d.mu.Unlock()
}

// drop closes the backend connection bound, if any (never kept).
func (d *gdriver) drop() {
	d.mu.Lock()
	c, u := d.bc, d.bu
	d.bc, d.bu = nil, nil
	d.mu.Unlock()
	if c != nil {
		closeConn(u, c)
	}
	d.n = 0
}

// release gives the backend connection back at Finish: kept when the
// core says so.
func (d *gdriver) release() {
	d.mu.Lock()
	c, u := d.bc, d.bu
	d.bc, d.bu = nil, nil
	d.mu.Unlock()
	d.n = 0
	if c == nil {
		return
	}
	if !d.ex.Reusable() {
		closeConn(u, c)
		return
	}
	_ = c.SetDeadline(time.Time{})
	connsOf(u).put(u, c, time.Now())
}

// timedOut acts on a backend read or write that returned a timeout: the
// client's reset, the termination timer (Tick), the core's Deadline
// (Expire), or none of them yet (None: go on).
func (d *gdriver) timedOut(now time.Time) exchange.Action {
	ex := &d.ex
	d.mu.Lock()
	gone := d.gone
	d.mu.Unlock()
	switch {
	case gone:
		return ex.Abort(pipeline.OutClientGone)
	case ex.TermAt() != 0 && now.UnixNano() >= ex.TermAt():
		return ex.Tick(now)
	case ex.Deadline() != 0 && now.UnixNano() >= ex.Deadline():
		return ex.Expire(now)
	}
	return exchange.None
}

// send writes the request to the backend, then reads its answer.
func (d *gdriver) send() exchange.Action {
	ex := &d.ex
	for len(ex.Unsent()) > 0 {
		d.setDeadline()
		n, err := d.bc.Write(ex.Unsent())
		ex.Wrote(n)
		if err == nil {
			continue
		}
		now := time.Now()
		if isTimeout(err) {
			if act := d.timedOut(now); act != exchange.None {
				return act
			}
			continue
		}
		return ex.Broke(pipeline.FailBroken, now)
	}
	return d.read()
}

// read reads the backend's answer until the exchange's next action that
// is not the driver's to carry out alone.
func (d *gdriver) read() exchange.Action {
	ex := &d.ex
	for {
		if d.n == len(d.buf) {
			// A response head larger than the buffer.
			return ex.Broke(pipeline.FailNoRetry, time.Now())
		}
		d.setDeadline()
		n, err := d.bc.Read(d.buf[d.n:])
		now := time.Now()
		if n > 0 {
			d.n += n
			k, act := ex.Read(d.buf[:d.n], now)
			switch act {
			case exchange.None:
				continue
			case exchange.WriteHead:
				act = d.writeHead(k)
			case exchange.Forward, exchange.Finish:
				act = d.forward(d.buf[:k], act)
			}
			if act != exchange.Forward {
				return act
			}
			continue
		}
		switch {
		case err == nil:
		case isTimeout(err):
			if act := d.timedOut(now); act != exchange.None {
				return act
			}
		case ex.State() == exchange.Relaying:
			act := ex.Closed()
			if act == exchange.Finish {
				act = d.forward(nil, act)
			}
			return act
		default:
			return ex.Broke(pipeline.FailBroken, now)
		}
	}
}

// isTimeout tells whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
