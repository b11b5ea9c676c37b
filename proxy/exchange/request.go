package exchange

import (
	"net/netip"
	"time"

	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// request.go: the header policy and forwarding of a request, and the one
// writer of the request a backend gets (HTTP/1.1), from a neutral head
// (pipeline/headers.go has the table of names; docs/request-path.md, "The header
// policy", says what the policy does and why).

// Forwarded reads what a trusted proxy sent (step 4 of the header policy,
// pipeline.PlanForwarding) into the scratch and returns the client's
// address: peer itself unless the app trusts it, else the address its
// X-Forwarded-For lines (merged into one list, RFC 9110 §5.3) name.
func (sc *Scratch) Forwarded(a *pipeline.App, h *Head, peer netip.Addr) netip.Addr {
	in := &sc.in
	*in = pipeline.TrustedFwd{}
	if !a.TrustedPeer(peer) {
		return peer
	}
	chain := sc.xff[:0]
	for i := 0; i < h.Raw.NFields; i++ {
		switch k := h.Raw.Kinds[i]; k {
		case pipeline.KindXFF, pipeline.KindXFProto, pipeline.KindXFHost:
			chain = in.Add(k, h.Value(i), chain)
		case pipeline.KindOther:
			if exact, _ := pipeline.NameMatch(h.Name(i), a.ReqID); exact {
				in.Add(pipeline.KindOther, h.Value(i), nil)
			}
		}
	}
	sc.xff = chain
	return a.ClientAddr(peer, in.XFF)
}

// keep is the header policy for a request field of kind k, named name:
// hop-by-hop fields (and the ones an h2 head cannot carry to HTTP/1.1:
// Host, which :authority replaces, Upgrade, Expect, Transfer-Encoding)
// and every copy of the forwarding headers and of the request ID, in
// any spelling, go (one of each is added); so does a client's copy of
// the app's load header.
func keep(a *pipeline.App, h2 bool, k uint8, name []byte) bool {
	switch k {
	case pipeline.KindConnection, pipeline.KindHopByHop, pipeline.KindXFF, pipeline.KindXFProto, pipeline.KindXFHost,
		pipeline.KindFwdAlias, pipeline.KindUpgrade, pipeline.KindExpect, pipeline.KindTransferEncoding:
		return false
	case pipeline.KindHost:
		return !h2
	case pipeline.KindOther:
		if exact, alias := pipeline.NameMatch(name, a.ReqID); exact || alias || a.DropIncoming(name) {
			return false
		}
	}
	return true
}

// AppendRequest appends the request as a backend gets it to dst: the
// request line, the fields the header policy keeps (an HTTP/1.1 head's
// lines as the client sent them; an h2 head's fields as "name: value",
// Host from :authority first and the cookies joined last), one of each
// forwarding header (the plan: pipeline.PlanForwarding, from what
// Forwarded read into the scratch), the request ID, the load header when
// the app sends one (class, at now), and the body. Trace context
// (pipeline/trace.go): tr is the request's (readTrace); when the app's
// trace_context is generate and tr holds none, a trace is started in tr
// and sent as the one traceparent, every incoming traceparent and
// tracestate dropped; otherwise they pass as they came. ids makes the
// request ID and the trace's ids. It returns the request and the request
// ID (a slice of the scratch, valid until the next call).
// The HTTP/1.1 path's bytes are exactly the ones its engines always
// wrote: the request line is rebuilt from its parts, which the strict
// parser guarantees are all it held.
func (sc *Scratch) AppendRequest(dst []byte, a *pipeline.App, h *Head, peer netip.Addr, ids *pipeline.IDGen, tr *pipeline.Trace, class int, now time.Time) (req, id []byte) {
	if a.Trace == pipeline.TraceGenerate && !tr.Valid() {
		tr.Start(ids)
	}
	started := tr.Started()
	r := append(dst, h.Method()...)
	r = append(r, ' ')
	r = append(r, h.Target()...)
	r = append(r, " HTTP/1.1\r\n"...)
	if h.H2 {
		r = append(append(append(r, "Host: "...), h.Host()...), "\r\n"...)
	}
	cookies := false
	for i := 0; i < h.Raw.NFields; i++ {
		name := h.Name(i)
		if !keep(a, h.H2, h.Raw.Kinds[i], name) {
			continue
		}
		if started && h.Raw.Kinds[i] == pipeline.KindOther && (pipeline.IsTraceparent(name) || pipeline.IsTracestate(name)) {
			continue
		}
		switch {
		case !h.H2:
			r = append(r, h.Raw.Fields[i].Line.Of(h.B)...)
		case isCookie(h, i):
			cookies = true
		default:
			r = append(append(append(append(r, name...), ": "...), h.Value(i)...), "\r\n"...)
		}
	}
	if cookies {
		r = append(appendCookies(append(r, "cookie: "...), h), "\r\n"...)
	}
	var fw pipeline.Forwarding
	sc.fwd, fw = pipeline.PlanForwarding(sc.fwd, &sc.in, peer, h.TLS, h.Host(), ids)
	r = append(append(append(r, "X-Forwarded-For: "...), fw.XFF...), "\r\n"...)
	r = append(append(append(r, "X-Forwarded-Proto: "...), fw.Proto...), "\r\n"...)
	r = append(append(append(r, "X-Forwarded-Host: "...), fw.Host...), "\r\n"...)
	r = append(append(append(append(r, a.ReqID...), ": "...), fw.ID...), "\r\n"...)
	if started {
		r = append(append(append(r, pipeline.HdrTraceparent+": "...), tr.Header()...), "\r\n"...)
	}
	if a.Load != nil { // the degradation signal (pipeline/load.go)
		r = append(append(r, a.LoadHeader...), ": "...)
		r = append(a.AppendLoad(r, class, now), "\r\n"...)
	}
	r = append(r, "\r\n"...)
	return append(r, h.Body...), fw.ID
}

// Scratch is what a driver's exchanges use one at a time: the parse of a
// backend's response head, the forwarding plan's buffers, the
// classifier's view. One per event loop (its exchanges never run at once)
// or per goroutine; never shared between goroutines. Its zero value is
// ready.
type Scratch struct {
	ids   pipeline.IDGen      // request IDs and trace ids (seeded on first use)
	in    pipeline.TrustedFwd // what a trusted proxy sent (Forwarded)
	xff   []byte              // its X-Forwarded-For lines, merged
	fwd   []byte              // the forwarding headers' values (PlanForwarding)
	view  view
	rh    pipeline.RawHead     // a backend's response head (Read)
	resp  []byte               // its bytes, from the status line
	st    []byte               // a Server-Timing stripped (RespField)
	reply pipeline.Reply       // sentry's own answer (Reply)
	acc   pipeline.AccessEntry // the access log's entry (Done)
}

// View is the classifier's view of h (classify.Request), valid until the
// scratch's next use.
func (sc *Scratch) View(h *Head) classify.Request {
	sc.view.h = h
	return &sc.view
}

// readTrace reads h's trace context into t: valid only when h has
// exactly one traceparent field and it parses (pipeline.Trace.Read);
// several are treated as none, since their order across hops is not
// reliable.
func readTrace(t *pipeline.Trace, h *Head) {
	t.Reset()
	at := -1
	for i := 0; i < h.Raw.NFields; i++ {
		if h.Raw.Kinds[i] == pipeline.KindOther && pipeline.IsTraceparent(h.Name(i)) {
			if at >= 0 {
				return
			}
			at = i
		}
	}
	if at >= 0 {
		t.Read(h.Value(at))
	}
}
