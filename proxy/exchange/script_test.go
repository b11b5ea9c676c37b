package exchange

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/internal/scripttest"
	"github.com/sentry-proxy/sentry/proxy/exchange/exchangetest"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// TestExchangeScripts drives one Exchange through the scripts in
// testdata/exchange/*.txt, on a manual clock, with the script as its
// driver: no socket, no loop, no sleep. Each command is an event; the
// script prints the actions the core returns, the state transitions,
// what admission was told and the access record. Where a real driver
// would go on by itself the script does too: after WriteHead it calls
// Relay and Body, after an ending action (Finish, Reply, Abort) Done, and
// after Cut Terminate.
//
// Commands:
//
//	start "raw HTTP/1.1 head" [peer=IP]     a request (its body after the head)
//	start-h2 "method" "path" "authority" ["name" "value" ...]  an h2 stream's head
//	decide admit|reject                     the parked request's batch run decides
//	bound [connecting] [reused]             a connection to the picked backend
//	capped                                  its connections are at max_conns_per_backend
//	connect-failed                          the connect failed
//	connected                               the connect in progress ended well
//	wrote [n]                               n bytes of the request went (default: all; with writes=manual)
//	read "bytes"                            the backend sent bytes (kept until a head is whole)
//	closed                                  the backend closed its connection
//	broke [noretry]                         the connection failed (reset; or a response not to relay)
//	advance 10ms                            the clock moves; a due deadline or timer fires
//	abort [reason]                          the driver ends it (client_gone by default)
//	set park=true|false terminate=UB|off connect-timeout=D writes=manual|all
//	state                                   where the exchange is
func TestExchangeScripts(t *testing.T) {
	scripttest.RunAll(t, "testdata/exchange/*.txt", func(t *testing.T, _ string) scripttest.Exec {
		return newExScript(t).exec
	})
}

// exScript is one script's exchange and the driver around it.
type exScript struct {
	t       *testing.T
	ex      Exchange
	env     Env
	sc      Scratch
	ctl     *exchangetest.Control
	a       *pipeline.App
	now     time.Time
	out     []string
	head    Head // the request's, as the driver keeps it (B: its own copy)
	rh      pipeline.RawHead
	peer    netip.Addr
	pending []byte // backend bytes kept until the head is whole
	// manualWrites: a Send is written as the script says (wrote), not
	// at once.
	manualWrites bool
	illegal      atomic.Uint64
}

func newExScript(t *testing.T) *exScript {
	h := &exScript{t: t, now: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)}
	h.ctl = &exchangetest.Control{Printf: h.printf}
	h.a = exchangetest.App(t, h.ctl)
	h.env = Env{IDs: testIDs(), Log: hclog.NewNullLogger(), Illegal: &h.illegal, Strict: true,
		Access: func(e *pipeline.AccessEntry) {
			r := pipeline.OutcomeReason[e.Outcome]
			if r == "" {
				r = "-"
			}
			h.printf("record %s %s %s status=%d outcome=%s class=%s verdict=%s in=%d out=%d upstream=%v",
				e.Method, e.URI, e.Proto, e.Status, r, e.ClassName(), e.VerdictName(), e.BytesIn, e.BytesOut, e.Upstrm)
		},
		Trace: func(_ *Exchange, from, to State) { h.printf("state: %v -> %v", from, to) },
	}
	h.ex.Init(&h.env, &h.sc)
	return h
}

func (h *exScript) printf(format string, args ...any) {
	h.out = append(h.out, fmt.Sprintf(format, args...))
}

// quoted returns the Go-quoted strings of cmd, in order.
func (h *exScript) quoted(line int, cmd string) []string {
	var qs []string
	for i := strings.IndexByte(cmd, '"'); i >= 0; i = strings.IndexByte(cmd, '"') {
		q, err := strconv.QuotedPrefix(cmd[i:])
		if err != nil {
			h.t.Fatalf("line %d: %v", line, err)
		}
		s, _ := strconv.Unquote(q)
		qs = append(qs, s)
		cmd = cmd[i+len(q):]
	}
	return qs
}

func (h *exScript) exec(line int, cmd string) []string {
	h.out = nil
	fields := strings.Fields(cmd)
	args := scripttest.Args(fields[1:])
	ex := &h.ex
	switch fields[0] {
	case "set":
		for k, v := range args {
			switch k {
			case "park":
				h.ctl.Parks = v == "true"
			case "terminate":
				upper := time.Duration(0)
				if v != "off" {
					upper, _ = time.ParseDuration(v)
				}
				if err := exchangetest.Terminate(h.a, 10*time.Millisecond, upper); err != nil {
					h.t.Fatalf("line %d: %v", line, err)
				}
			case "writes":
				h.manualWrites = v == "manual"
			case "connect-timeout":
				d, _ := time.ParseDuration(v)
				h.a.Shared.Connect.Store(int64(d))
			default:
				h.t.Fatalf("line %d: set %s: unknown", line, k)
			}
		}
	case "start":
		h.peer = netip.MustParseAddr("198.51.100.7")
		if p := args["peer"]; p != "" {
			h.peer = netip.MustParseAddr(p)
		}
		b := []byte(h.quoted(line, cmd)[0])
		if pipeline.ParseRequestHead(b, &h.rh) != pipeline.HeadOK {
			h.t.Fatalf("line %d: the head does not parse", line)
		}
		h.head = Head{B: b, Raw: &h.rh, Body: b[h.rh.N:], Size: int64(len(b))}
		h.act(ex.Start(h.a, &h.head, h.peer, nil, true, h.now))
	case "start-h2":
		h.peer = netip.MustParseAddr("198.51.100.7")
		q := h.quoted(line, cmd)
		hd := h2Head(q[0], q[1], q[2], q[3:]...)
		h.head, h.rh = *hd, *hd.Raw
		h.head.Raw = &h.rh
		h.head.Size = 64
		h.act(ex.Start(h.a, &h.head, h.peer, nil, true, h.now))
	case "decide":
		h.ctl.Decide(fields[1] == "admit")
		d, ok := ex.Pending().Result()
		if !ok {
			h.t.Fatalf("line %d: no decision", line)
		}
		h.act(ex.Resume(d, &h.head, h.now))
	case "bound":
		_, connecting := args["connecting"]
		_, reused := args["reused"]
		h.pending = nil
		h.act(ex.Bound(connecting, reused, h.now))
	case "capped":
		h.act(ex.Capped(h.now))
	case "connect-failed":
		h.act(ex.ConnectFailed(fmt.Errorf("connection refused"), h.now))
	case "connected":
		h.act(ex.Connected(h.now))
	case "wrote":
		n := len(ex.Unsent())
		if len(fields) > 1 {
			n, _ = strconv.Atoi(fields[1])
		}
		ex.Wrote(n)
		h.printf("unsent %d bytes", len(ex.Unsent()))
	case "read":
		h.pending = append(h.pending, h.quoted(line, cmd)[0]...)
		h.read()
	case "closed":
		if ex.State() != Relaying {
			h.act(ex.Broke(pipeline.FailBroken, h.now))
		} else {
			h.body(nil, ex.Closed())
		}
	case "broke":
		f := pipeline.FailBroken
		if _, ok := args["noretry"]; ok {
			f = pipeline.FailNoRetry
		}
		h.act(ex.Broke(f, h.now))
	case "advance":
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			h.t.Fatalf("line %d: %v", line, err)
		}
		h.now = h.now.Add(d)
		ns := h.now.UnixNano()
		if t := ex.TermAt(); t != 0 && ns >= t {
			h.act(ex.Tick(h.now))
		}
		if dl := ex.Deadline(); ex.Busy() && dl != 0 && ns > dl {
			h.act(ex.Expire(h.now))
		}
	case "abort":
		o := pipeline.OutClientGone
		if len(fields) > 1 {
			for i, r := range pipeline.OutcomeReason {
				if r == fields[1] {
					o = pipeline.Outcome(i)
				}
			}
		}
		h.act(ex.Abort(o))
	case "state":
		h.printf("state %v", ex.State())
	default:
		h.t.Fatalf("line %d: unknown command %q", line, cmd)
	}
	if n := h.illegal.Load(); n != 0 {
		h.t.Fatalf("line %d: %d illegal transitions", line, n)
	}
	return h.out
}

// read gives the core what the backend sent since the last head or body.
func (h *exScript) read() {
	ex := &h.ex
	data := h.pending
	n, act := ex.Read(data, h.now)
	switch act {
	case None:
		return
	case WriteHead:
		h.pending = nil
		ex.Relay(h.now)
		resp, rh := ex.Response()
		h.printf("action: write-head %d", ex.Status())
		for i := 0; i < rh.NFields; i++ {
			v, keep := ex.RespField(i)
			f := &rh.Fields[i]
			switch {
			case !keep:
			case v != nil:
				h.printf("  %s: %s (stripped)", f.Name.Of(resp), v)
			default:
				h.printf("  %s: %s", f.Name.Of(resp), f.Value.Of(resp))
			}
		}
		h.printf("  %s: %s", h.a.ReqID, ex.ID())
		k, act := ex.Body(data[n:], true)
		h.body(data[n:][:k], act)
		return
	}
	h.pending = nil
	h.body(data[:n], act)
}

// body carries out Body's or Read's action on body bytes b.
func (h *exScript) body(b []byte, act Action) {
	switch act {
	case Forward:
		h.printf("action: forward %q", b)
	case Finish:
		h.printf("action: finish %q reusable=%v", b, h.ex.Reusable())
		h.ex.Done(h.now)
	default:
		h.act(act)
	}
}

// act carries out an action as a driver would, printing it.
func (h *exScript) act(act Action) {
	ex := &h.ex
	for {
		switch act {
		case Connect:
			h.printf("action: connect %s", ex.Upstream().Addr)
		case Wait:
			h.printf("action: wait %s for %v", ex.Upstream().Addr, time.Duration(ex.Deadline()-h.now.UnixNano()))
		case Send:
			h.printf("action: send %q", ex.Unsent())
			if !h.manualWrites {
				ex.Wrote(len(ex.Unsent())) // a driver that wrote it all at once
			}
		case Reply:
			r := ex.Reply()
			h.printf("action: reply %d retry=%d verdict=%s grpc=%d id=%s %q", r.Status, r.Retry, r.Verdict, r.GRPC, ex.ID(), r.Body)
			ex.Done(h.now)
		case Abort:
			h.printf("action: abort %s", pipeline.OutcomeReason[ex.Outcome()])
			ex.Done(h.now)
		case Cut:
			h.printf("action: cut")
			act = ex.Terminate(h.now)
			continue
		case None:
		default:
			h.printf("action: %v", act)
		}
		return
	}
}
