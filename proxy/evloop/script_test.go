//go:build linux

package evloop

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/internal/scripttest"
	"github.com/sentry-proxy/sentry/proxy/exchange"
	"github.com/sentry-proxy/sentry/proxy/exchange/exchangetest"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// TestEvloopScripts drives one event loop's exchange logic through the
// scripts in testdata/evloop/*.txt, on a manual clock and scripted
// syscalls (scriptSys): no socket is opened, nothing sleeps. Each command
// prints the syscalls the loop made, its exchange-state transitions and
// what admission was told.
//
// Commands (c1, c2, … are client connections in accept order; b1, b2, …
// backend connections in dial order):
//
//	accept                      a client connects
//	recv c1 "bytes"             the client sends (Go-quoted)
//	hangup c1                   the client closes
//	writable c1 n=N|all         the client can take N more bytes (all: no limit)
//	connected b1 [err=N]        the connect in progress ends (SO_ERROR N; 0: up)
//	backend-recv b1 [x=N] "bytes"  the backend sends (the bytes N times)
//	backend-hangup b1 [reset]   the backend closes (or resets)
//	advance 10ms                the clock moves; the loop sweeps its timers
//	decide admit|reject         the parked requests' batch run decides (wakes the loop)
//	set park=true|false client-cap=N dial=refuse|progress|now terminate=[LB,]UB|off max-conns=N
//	term                        the class's threshold, terminations and reclaimed time
//	state c1                    the exchange state of c1
//	received c1                 what c1 was sent so far (lengths; the body, abbreviated)
//	budget                      the response buffers' account
//	set buffer-mem=N buffer-file=N buffer-mem-total=N buffer-file-total=N buffering=on|off tempfile=fail|ok
//	failures                    each backend's passive-health failures
//	holds c1                    what c1 holds: read buffer, output buffer, an exchange
//	pools                       the loop's free lists' lengths
func TestEvloopScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/evloop/*.txt", func(t *testing.T, _ string) scripttest.Exec {
		h := newLoopScript(t)
		return h.exec
	})
}

// loopScript is one script's loop, with everything around it scripted.
type loopScript struct {
	t    *testing.T
	l    *eventLoop
	sys  *scriptSys
	ctl  *exchangetest.Control
	now  time.Time
	out  []string
	fail string
}

func newLoopScript(t *testing.T) *loopScript {
	h := &loopScript{t: t, now: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	h.sys = &scriptSys{h: h, fds: map[int]*scriptFD{}, next: 10, clientCap: -1}
	h.ctl = &exchangetest.Control{Printf: h.printf}
	a := exchangetest.App(t, h.ctl)
	var routes atomic.Pointer[pipeline.Route]
	routes.Store(&pipeline.Route{Default: a, Access: true})
	ids := new(pipeline.IDGen)
	ids.Counting("0123456789abcdef")
	cfg := Config{Addr: "127.0.0.1:1", LFD: 3, Loops: 1, Routes: &routes, IDs: ids, Log: hclog.NewNullLogger(),
		MaxHeader: 16384, Idle: 5 * time.Second, Write: time.Second, Header: 2 * time.Second,
		Linger: 5 * time.Second, IdleGrace: time.Second, Handoff: 4,
		OtherConns:   func() int { return 0 },
		BackendConns: func(*pipeline.Upstream) int { return 0 },
		TooManyConns: func() { h.printf("too many connections") },
		// The access log is how a script sees what the complete step
		// recorded (outcome and status: the metrics get the same): a
		// line "record METHOD URI status=N outcome=O" (the duration
		// depends on the real clock, so it is left out).
		Access: func(e *pipeline.AccessEntry) {
			r := pipeline.OutcomeReason[e.Outcome]
			if r == "" {
				r = "-" // relayed, or rejected by admission: no error reason
			}
			h.printf("record %s %s status=%d outcome=%s", e.Method, e.URI, e.Status, r)
		},
	}
	ff := &Front{cfg: cfg, lfd: 3, maxHeader: cfg.MaxHeader, idle: cfg.Idle, write: cfg.Write, hdr: cfg.Header}
	// The scripts run the exchanges strictly: an illegal transition
	// panics here, instead of being counted.
	ff.env = &exchange.Env{IDs: ids, Log: cfg.Log, Access: cfg.Access, Illegal: &ff.illegal, Strict: true}
	h.sys.fds[3] = &scriptFD{name: "listen"}
	h.sys.fds[4] = &scriptFD{name: "epoll"}
	h.sys.fds[5] = &scriptFD{name: "eventfd"}
	l := &eventLoop{ff: ff, ep: 4, efd: 5, sys: h.sys, clock: func() time.Time { return h.now }, idleBk: map[*pipeline.Upstream][]*bconn{},
		connWait: map[*pipeline.Upstream][]waiter{}, waitN: map[*pipeline.Upstream]int{}, nconn: map[*pipeline.Upstream]int{}}
	ff.env.Trace = func(ex *exchange.Exchange, from, to exchange.State) {
		h.printf("%s: %v -> %v", h.sys.nameOf(h.clientOf(ex).fd), from, to)
	}
	l.tick()
	l.nextSweep = l.nowNs + int64(sweepEvery)
	h.l = l
	return h
}

// terminate gives the script's class a termination range with upper
// bound v ("lower,upper" or "upper": lower 10ms; "off": none;
// exchangetest.Terminate).
func (h *loopScript) terminate(line int, v string) {
	a := h.l.ff.cfg.Routes.Load().Default
	lower, upper := 10*time.Millisecond, time.Duration(0)
	if v != "off" {
		lo, up, ok := strings.Cut(v, ",")
		if !ok {
			up, lo = lo, ""
		}
		var err error
		if lo != "" {
			if lower, err = time.ParseDuration(lo); err != nil {
				h.t.Fatalf("line %d: terminate=%s: %v", line, v, err)
			}
		}
		if upper, err = time.ParseDuration(up); err != nil {
			h.t.Fatalf("line %d: terminate=%s: %v", line, v, err)
		}
	}
	if err := exchangetest.Terminate(a, lower, upper); err != nil {
		h.t.Fatalf("line %d: %v", line, err)
	}
}

// clientOf is the client connection whose exchange ex is.
func (h *loopScript) clientOf(ex *exchange.Exchange) *cconn {
	for _, c := range h.l.clients {
		if c.ex == ex {
			return c
		}
	}
	h.t.Fatalf("an exchange of no client connection")
	return nil
}

func (h *loopScript) printf(format string, args ...any) {
	h.out = append(h.out, fmt.Sprintf(format, args...))
}

func (h *loopScript) exec(line int, cmd string) []string {
	h.out = nil
	fields := strings.Fields(cmd)
	args := scripttest.Args(fields[1:])
	quoted := func() []byte {
		i := strings.IndexByte(cmd, '"')
		if i < 0 {
			h.t.Fatalf("line %d: %s: no quoted bytes", line, cmd)
		}
		s, err := strconv.Unquote(cmd[i:])
		if err != nil {
			h.t.Fatalf("line %d: %s: %v", line, cmd, err)
		}
		return []byte(s)
	}
	client := func() (*cconn, *scriptFD) {
		fd, f := h.sys.byName(fields[1])
		if f == nil || fd >= len(h.l.cl) || h.l.cl[fd] == nil {
			h.t.Fatalf("line %d: %s: no client connection %s", line, cmd, fields[1])
		}
		return h.l.cl[fd], f
	}
	backend := func() (*bconn, *scriptFD) {
		fd, f := h.sys.byName(fields[1])
		if f == nil || fd >= len(h.l.bk) || h.l.bk[fd] == nil {
			h.t.Fatalf("line %d: %s: no backend connection %s", line, cmd, fields[1])
		}
		return h.l.bk[fd], f
	}
	switch fields[0] {
	case "set":
		for k, v := range args {
			switch k {
			case "park":
				h.ctl.Parks = v == "true"
			case "client-cap":
				n, _ := strconv.Atoi(v)
				h.sys.clientCap = n
			case "dial":
				h.sys.dial = v
			case "terminate":
				h.terminate(line, v)
			case "max-conns":
				n, _ := strconv.Atoi(v)
				h.l.ff.cfg.Routes.Load().Default.Policy.MaxConnsPerBackend = n
			case "buffer-mem", "buffer-mem-total", "buffer-file", "buffer-file-total":
				// Response buffering (Config.Resp), in bytes.
				n, _ := strconv.ParseInt(v, 10, 64)
				b := h.l.ff.cfg.Resp
				if b == nil {
					b = respbuf.NewBudget(respbuf.Limits{Dir: "/tmp"})
					h.l.ff.cfg.Resp = b
				}
				lim := *b.Limits()
				switch k {
				case "buffer-mem":
					lim.Mem = n
				case "buffer-mem-total":
					lim.MemTotal = n
				case "buffer-file":
					lim.File = n
				case "buffer-file-total":
					lim.FileTotal = n
				}
				b.SetLimits(lim)
			case "tempfile":
				h.sys.tmpFail = v == "fail"
			case "buffering":
				h.l.ff.cfg.Routes.Load().Default.Policy.ResponseBufferingOff = v == "off"
			default:
				h.t.Fatalf("line %d: set %s: unknown", line, k)
			}
		}
	case "accept":
		h.sys.acceptQ++
		h.l.accept()
	case "recv":
		c, f := client()
		f.in = append(f.in, quoted()...)
		h.l.clientEvent(c, unix.EPOLLIN)
	case "hangup":
		c, f := client()
		f.eof = true
		h.l.clientEvent(c, unix.EPOLLIN|unix.EPOLLRDHUP)
	case "writable":
		c, f := client()
		if args["n"] == "all" {
			f.cap = -1
		} else {
			f.cap, _ = strconv.Atoi(args["n"])
		}
		h.l.clientEvent(c, unix.EPOLLOUT)
	case "connected":
		bc, f := backend()
		f.soErr, _ = strconv.Atoi(args["err"])
		h.l.backendEvent(bc, unix.EPOLLOUT)
	case "backend-recv":
		bc, f := backend()
		b := quoted()
		if x := args["x"]; x != "" {
			n, _ := strconv.Atoi(x)
			b = []byte(strings.Repeat(string(b), n))
		}
		f.in = append(f.in, b...)
		h.l.backendEvent(bc, unix.EPOLLIN)
	case "budget":
		st := h.l.ff.cfg.Resp.Stats()
		h.printf("budget: mem=%d file=%d high=%d/%d responses=%d spilled=%d full=%d/%d file-errors=%d",
			st.Mem, st.File, st.MemHigh, st.FileHigh, st.Responses, st.Spilled, st.FullResponse, st.FullTotal, st.FileErrors)
	case "received":
		// What a client has been sent so far, in all: its length, and the
		// bytes after the head.
		_, f := client()
		body := f.sent
		if i := strings.Index(string(body), "\r\n\r\n"); i >= 0 {
			body = body[i+4:]
		}
		h.printf("%s: %d bytes, body %d bytes %q", fields[1], len(f.sent), len(body), abbrev(body))
	case "backend-hangup":
		bc, f := backend()
		if _, ok := args["reset"]; ok {
			f.reset = true
		} else {
			f.eof = true
		}
		h.l.backendEvent(bc, unix.EPOLLIN|unix.EPOLLRDHUP)
	case "advance":
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			h.t.Fatalf("line %d: %v", line, err)
		}
		// As run does: the clock is read once per round, and the timers
		// are swept every sweepEvery.
		for end := h.now.Add(d); h.now.Before(end); {
			step := sweepEvery
			if rest := end.Sub(h.now); rest < step {
				step = rest
			}
			h.now = h.now.Add(step)
			h.l.tick()
			if h.l.nowNs >= h.l.nextSweep {
				h.l.sweep()
			}
		}
	case "decide":
		h.ctl.Decide(fields[1] == "admit")
		// As run does on the eventfd's readiness.
		_, _ = h.l.sys.Read(h.l.efd, h.l.efdBuf[:])
		h.l.pollParked()
	case "failures":
		for _, b := range h.l.ff.cfg.Routes.Load().Default.Pool.Backends() {
			h.printf("%s: failures=%d healthy=%v", b.Addr(), b.Failures(), b.Healthy())
		}
	case "term":
		cl := h.l.ff.cfg.Routes.Load().Default.Term.Class(0)
		n := cl.Counts()
		h.printf("term: threshold=%v terminated=%d reclaimed=%v", cl.Threshold(), n.Terminated, n.Reclaimed)
	case "state":
		c, _ := client()
		h.printf("%s: %v", fields[1], c.ex.State())
	case "holds":
		// What a client connection holds beside its cconn (mem_linux.go):
		// a read buffer, an output buffer, an exchange of its own.
		c, _ := client()
		h.printf("%s: in=%v out=%v exchange=%v", fields[1], c.in != nil, c.out != nil, c.ex != &h.l.noEx)
	case "pools":
		// What the loop keeps for its next exchanges (mem_linux.go).
		h.printf("pools: bufs=%d outs=%d exchanges=%d", len(h.l.bufs.items), len(h.l.outs.items), len(h.l.exs.items))
	default:
		h.t.Fatalf("line %d: unknown command %q", line, cmd)
	}
	// The end of a round, as run does it: exchanges waiting for a
	// connection get one where the cap has room again.
	if h.l.waitKick {
		h.l.dialWaiters()
	}
	return h.out
}

// scriptSys is a Sys whose descriptors are scripted: what a peer sent
// is read, what the loop writes is printed.
type scriptSys struct {
	h         *loopScript
	fds       map[int]*scriptFD
	next      int
	clients   int
	backends  int
	acceptQ   int
	clientCap int    // what a new client connection can take (-1: no limit)
	dial      string // "" or "progress": connect in progress; "now"; "refuse"
	files     int    // temporary files made
	tmpFail   bool   // TempFile fails (ENOSPC)
	wakes     int    // unread eventfd wake-ups
}

type scriptFD struct {
	name   string
	in     []byte // what the peer sent, not yet read
	eof    bool   // the peer closed (after in is read)
	reset  bool   // the peer reset the connection
	cap    int    // bytes the peer can take before EAGAIN (-1: no limit)
	sent   []byte // what the loop wrote to it
	soErr  int    // SO_ERROR of a connect in progress
	closed bool
}

func (s *scriptSys) byName(name string) (int, *scriptFD) {
	for fd, f := range s.fds {
		if f.name == name && !f.closed {
			return fd, f
		}
	}
	return -1, nil
}

func (s *scriptSys) nameOf(fd int) string {
	if f := s.fds[fd]; f != nil {
		return f.name
	}
	return "fd" + strconv.Itoa(fd)
}

func (s *scriptSys) open(name string, cap int) int {
	fd := s.next
	s.next++
	s.fds[fd] = &scriptFD{name: name, cap: cap}
	return fd
}

func (s *scriptSys) Read(fd int, p []byte) (int, error) {
	if fd == s.h.l.efd {
		if s.wakes == 0 {
			return -1, unix.EAGAIN
		}
		s.wakes = 0
		return 8, nil
	}
	f := s.fds[fd]
	switch {
	case f == nil || f.closed:
		return -1, unix.EBADF
	case len(f.in) > 0:
		n := copy(p, f.in)
		f.in = f.in[n:]
		return n, nil
	case f.reset:
		return -1, unix.ECONNRESET
	case f.eof:
		return 0, nil
	}
	return -1, unix.EAGAIN
}

func (s *scriptSys) Write(fd int, p []byte) (int, error) {
	if fd == s.h.l.efd {
		s.wakes++
		s.h.printf("wake")
		return 8, nil
	}
	f := s.fds[fd]
	switch {
	case f == nil || f.closed:
		return -1, unix.EBADF
	case f.reset || f.eof && strings.HasPrefix(f.name, "b"):
		return -1, unix.EPIPE
	case f.cap == 0:
		s.h.printf("write %s: EAGAIN", f.name)
		return -1, unix.EAGAIN
	}
	n := len(p)
	if f.cap > 0 && n > f.cap {
		n = f.cap
	}
	if f.cap > 0 {
		f.cap -= n
	}
	s.h.printf("write %s %q", f.name, abbrev(p[:n]))
	f.sent = append(f.sent, p[:n]...)
	return n, nil
}

// abbrev shortens what a script prints of a long write: its length, its
// first and last bytes.
func abbrev(b []byte) string {
	if len(b) <= 1024 {
		return string(b)
	}
	return fmt.Sprintf("%s…(%d bytes)…%s", b[:24], len(b), b[len(b)-8:])
}

func (s *scriptSys) Close(fd int) error {
	if f := s.fds[fd]; f != nil && !f.closed {
		f.closed = true
		s.h.printf("close %s", f.name)
		return nil
	}
	return unix.EBADF
}

func (s *scriptSys) ShutdownWrite(fd int) error {
	s.h.printf("shutdown %s", s.nameOf(fd))
	return nil
}

func (s *scriptSys) Accept(lfd int) (int, unix.Sockaddr, error) {
	if s.acceptQ == 0 {
		return -1, nil, unix.EAGAIN
	}
	s.acceptQ--
	s.clients++
	name := "c" + strconv.Itoa(s.clients)
	s.h.printf("accept %s", name)
	return s.open(name, s.clientCap), &unix.SockaddrInet4{Addr: [4]byte{198, 51, 100, 7}, Port: 40000 + s.clients}, nil
}

func (s *scriptSys) Dial(sa unix.Sockaddr) (int, bool, error) {
	a := sa.(*unix.SockaddrInet4)
	to := netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	if s.dial == "refuse" {
		s.h.printf("connect %v: refused", to)
		return -1, false, unix.ECONNREFUSED
	}
	s.backends++
	name := "b" + strconv.Itoa(s.backends)
	fd := s.open(name, -1)
	if s.dial == "now" {
		s.h.printf("connect %s %v", name, to)
		return fd, false, nil
	}
	s.h.printf("connect %s %v: in progress", name, to)
	return fd, true, nil
}

func (s *scriptSys) ConnectError(fd int) (int, error) { return s.fds[fd].soErr, nil }

// A response buffer's temporary files (f1, f2, …) are scriptFDs too: their
// contents in sent, each call printed.
func (s *scriptSys) TempFile(dir string) (int, error) {
	if s.tmpFail {
		s.h.printf("tempfile: ENOSPC")
		return -1, unix.ENOSPC
	}
	s.files++
	name := "f" + strconv.Itoa(s.files)
	s.h.printf("tempfile %s", name)
	return s.open(name, -1), nil
}

func (s *scriptSys) Pwrite(fd int, p []byte, off int64) (int, error) {
	f := s.fds[fd]
	if f == nil || f.closed {
		return 0, unix.EBADF
	}
	for int64(len(f.sent)) < off+int64(len(p)) {
		f.sent = append(f.sent, 0)
	}
	copy(f.sent[off:], p)
	s.h.printf("pwrite %s %d@%d", f.name, len(p), off)
	return len(p), nil
}

func (s *scriptSys) Pread(fd int, p []byte, off int64) (int, error) {
	f := s.fds[fd]
	if f == nil || f.closed {
		return 0, unix.EBADF
	}
	n := copy(p, f.sent[off:])
	s.h.printf("pread %s %d@%d", f.name, n, off)
	return n, nil
}

func (s *scriptSys) EpollCtl(ep, op, fd int, events uint32, tag int32) error {
	if fd == s.h.l.ff.lfd || fd == s.h.l.efd {
		return nil
	}
	name := s.nameOf(fd)
	switch op {
	case unix.EPOLL_CTL_DEL:
		s.h.printf("epoll %s: del", name)
	default:
		s.h.printf("epoll %s: %s", name, epollNames(events))
	}
	return nil
}

func (s *scriptSys) EpollWait(int, []unix.EpollEvent, int) (int, error) {
	return 0, errors.New("scriptSys: the script drives the loop; EpollWait is never called")
}

func epollNames(ev uint32) string {
	var n []string
	for _, e := range []struct {
		bit  uint32
		name string
	}{{unix.EPOLLIN, "in"}, {unix.EPOLLOUT, "out"}, {unix.EPOLLRDHUP, "rdhup"}} {
		if ev&e.bit != 0 {
			n = append(n, e.name)
		}
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ",")
}
