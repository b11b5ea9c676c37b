package pipeline

import "github.com/sentry-proxy/sentry/policy"

// trace.go: W3C Trace Context (https://www.w3.org/TR/trace-context/):
// reading a request's traceparent and starting a trace. docs/tracing.md
// says what each mode (an app's trace_context) does and why.

// TraceMode is an app's trace_context.
type TraceMode uint8

const (
	// TracePass (the default): a valid traceparent is read (its trace ID
	// logged); traceparent and tracestate are forwarded unchanged.
	TracePass TraceMode = iota
	// TraceGenerate: as TracePass, and a request forwarded without a
	// valid traceparent gets one sentry starts (Trace.Start).
	TraceGenerate
	// TraceOff: trace context is not read; its headers pass as any other.
	TraceOff
)

// TraceModeOf is the TraceMode of a policy value.
func TraceModeOf(c policy.TraceContext) TraceMode {
	switch c {
	case policy.TraceGenerate:
		return TraceGenerate
	case policy.TraceOff:
		return TraceOff
	}
	return TracePass
}

// The trace context headers' names: HdrTraceparent is written in the
// canonical form fasthttp writes every name in, so every engine sends
// the same bytes.
const (
	HdrTraceparent = "Traceparent"
	HdrTracestate  = "Tracestate"
)

// IsTraceparent and IsTracestate tell whether a field's name is one of
// the trace context headers (any case; no underscore spelling: these are
// not forwarding headers sentry vouches for, see docs/tracing.md).
func IsTraceparent(name []byte) bool {
	return len(name) == len(HdrTraceparent) && EqFoldString(name, HdrTraceparent)
}

func IsTracestate(name []byte) bool {
	return len(name) == len(HdrTracestate) && EqFoldString(name, HdrTracestate)
}

// traceLen is the length of a version-00 traceparent:
// "00-" trace-id(32) "-" parent-id(16) "-" flags(2).
const traceLen = 55

const (
	traceNone    uint8 = iota
	traceIn            // a valid traceparent came with the request
	traceStarted       // sentry started the trace (TraceGenerate)
)

// Trace is one request's trace context. Its zero value is "none".
type Trace struct {
	tp    [traceLen]byte // the traceparent, version 00 (for one sentry started: the one it sends)
	state uint8
}

// Reset makes t "none".
func (t *Trace) Reset() { t.state = traceNone }

// Valid tells whether t holds a trace: a valid incoming traceparent or
// one sentry started.
func (t *Trace) Valid() bool { return t.state != traceNone }

// Started tells whether sentry started the trace.
func (t *Trace) Started() bool { return t.state == traceStarted }

// TraceID is the trace ID in hex (nil: none). The slice is t's own.
func (t *Trace) TraceID() []byte {
	if t.state == traceNone {
		return nil
	}
	return t.tp[3:35]
}

// SpanID is sentry's span ID in hex -- the parent-id of the traceparent
// sentry sent -- when sentry started the trace; nil otherwise (sentry
// makes no span of its own for a trace it forwards: docs/tracing.md).
func (t *Trace) SpanID() []byte {
	if t.state != traceStarted {
		return nil
	}
	return t.tp[36:52]
}

// Header is the traceparent sentry sends when it started the trace.
func (t *Trace) Header() []byte { return t.tp[:] }

// Read reads the value of a request's only traceparent field into t and
// reports whether it is valid (Trace Context §3.2): version two lowercase
// hex digits, not ff; trace-id 32 and parent-id 16 lowercase hex digits,
// neither all zeros; flags two lowercase hex digits; for version 00
// nothing after them, for a later version either nothing or '-' and
// anything (§4.3: parsed as version 00, the rest ignored). Spaces and
// tabs around the value are ignored. An invalid value leaves t "none":
// it is treated as absent.
func (t *Trace) Read(v []byte) bool {
	t.state = traceNone
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if len(v) < traceLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	if !lowerHex(v[0:2]) || !lowerHex(v[3:35]) || !lowerHex(v[36:52]) || !lowerHex(v[53:55]) {
		return false
	}
	switch {
	case v[0] == 'f' && v[1] == 'f':
		return false
	case v[0] == '0' && v[1] == '0':
		if len(v) != traceLen {
			return false
		}
	default:
		if len(v) > traceLen && v[traceLen] != '-' {
			return false
		}
	}
	if allZero(v[3:35]) || allZero(v[36:52]) {
		return false
	}
	copy(t.tp[:], v[:traceLen])
	t.tp[0], t.tp[1] = '0', '0' // read as version 00
	t.state = traceIn
	return true
}

// Start starts a trace in t: a random trace-id and parent-id (sentry's
// span) from g, flags 01 (sampled: the backends' parent-based samplers
// then record the trace sentry asked for; docs/tracing.md).
func (t *Trace) Start(g *IDGen) {
	for {
		hexEncode(t.tp[3:19], g.Uint64())
		hexEncode(t.tp[19:35], g.Uint64())
		if !allZero(t.tp[3:35]) {
			break
		}
	}
	for {
		hexEncode(t.tp[36:52], g.Uint64())
		if !allZero(t.tp[36:52]) {
			break
		}
	}
	t.tp[0], t.tp[1], t.tp[2], t.tp[35], t.tp[52], t.tp[53], t.tp[54] = '0', '0', '-', '-', '-', '0', '1'
	t.state = traceStarted
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// LogRequest appends to kv the key/value pairs that name a request in
// sentry's own log lines (hclog): request_id, and trace_id when the
// request has a trace (span_id too when sentry started it). For lines
// off the hot path only: it allocates.
func LogRequest(kv []any, id []byte, t *Trace) []any {
	if len(id) > 0 {
		kv = append(kv, "request_id", string(id))
	}
	if t != nil && t.Valid() {
		kv = append(kv, "trace_id", string(t.TraceID()))
		if t.Started() {
			kv = append(kv, "span_id", string(t.SpanID()))
		}
	}
	return kv
}
