package pipeline

import (
	"net/netip"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// access.go: what an access-log line says about one exchange. Every
// engine (the event loops, fasthttp, h2) fills an AccessEntry the same
// way and hands it to one writer (package proxy, accesslog.go), only when
// the route logs access: with the log off nothing here runs.

// AccessEntry is one exchange as the access log sees it. The byte slices
// alias the engine's buffers and are valid only during the call that
// receives the entry.
type AccessEntry struct {
	Start    time.Time     // the request head arrived
	Duration time.Duration // to the response head (relayed) or the answer sentry wrote
	Client   netip.Addr    // the client's address, after trusted_proxies
	Method   []byte
	Host     []byte
	URI      []byte // as the client sent it
	Proto    string // "HTTP/1.1", "HTTP/2.0"
	Status   int
	BytesIn  int64 // request head and body bytes; -1: unknown
	BytesOut int64 // response body bytes sent; -1: unknown
	Agent    []byte
	Referer  []byte
	ID       []byte // the request ID (also in the response's request-ID header)
	Trace    Trace  // the request's trace context (trace.go): its TraceID, and SpanID when sentry started it

	App     *App
	Class   int               // the class index; -1: not classified
	Asked   bool              // admission gave a verdict (false: no controller, or refused before it)
	Verdict admission.Verdict // when Asked
	Outcome Outcome
	Backend *Upstream     // nil: not relayed
	Upstrm  time.Duration // the backend's time: dispatch to response head (0: not relayed)
}

// Reason is the exchange's one-word explanation: "admitted" for a relayed
// request, the admission verdict of a rejection (rejected_test,
// rejected_cascade, queue_full, rejected_priority, rejected_adaptive, ...),
// and otherwise the outcome's reason (no_backend, backend_timeout,
// client_gone, ...), as the metrics name it.
func (e *AccessEntry) Reason() string {
	switch e.Outcome {
	case OutRelayed:
		return "admitted"
	case OutRejected:
		if e.Asked {
			return e.Verdict.String()
		}
		return "rejected"
	}
	return OutcomeReason[e.Outcome]
}

// VerdictName is the admission verdict's name, or "-" when admission was
// not asked.
func (e *AccessEntry) VerdictName() string {
	if !e.Asked {
		return "-"
	}
	return e.Verdict.String()
}

// ClassName is the class's name, or "-".
func (e *AccessEntry) ClassName() string {
	if e.App == nil || e.App.Controller == nil || e.Class < 0 {
		return "-"
	}
	cs := e.App.Controller.Classes()
	if e.Class >= len(cs) {
		return "-"
	}
	return cs[e.Class]
}

// Decided copies what the pipeline's ticket knows into e: the class and
// the verdict, when admission gave one.
func (e *AccessEntry) Decided(t *Ticket) {
	e.Class = -1
	if t.decided {
		e.Class, e.Asked, e.Verdict = t.Class, true, t.verdict
	}
}
