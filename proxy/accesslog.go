package proxy

import (
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/internal/logwriter"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// accessLog writes the access log (policy log.access): one line per
// exchange, from every engine, through write. It has its own destination
// and switch, apart from the process logger and its level.
//
// Sampling: two token buckets, one for rejections (admission rejections
// and no-backend answers) and one for every other line, each refilled at
// its rate (lines/s) with a burst of one second's worth. A line that
// finds its bucket empty is dropped and counted
// (sentry_access_log_dropped_total{kind,reason="sampled"}); so under a
// flood the log's own rate is bounded by rate + reject_rate whatever the
// request rate, and the counters say how much was left out. Below the
// rates every line is written. Decision: a token bucket rather than "1 in
// N", because the bound then holds for any load, and a quiet service logs
// everything.
//
// Writing never blocks serving. Decision (issue 29: with a synchronous
// write under this lock, a reader of stdout or a FIFO that stopped
// reading stopped every serving loop within seconds, while /healthz kept
// answering): write formats the line and copies it into a bounded buffer
// (internal/logwriter, 1 MiB), and one goroutine of the Proxy's writes
// the buffer to the output in chunks of whole lines. When the output does
// not keep up, or is stuck, the buffer fills and further lines are
// dropped and counted (reason="buffer_full"); the requests are served as
// before. HAProxy (a ring or syslog) and Envoy (a flush thread) work the
// same way; nginx, writing access_log synchronously, stalls. The writer
// outlives policy reloads (its counters with it): a reload or SIGUSR1
// that opens the output again hands the new file to it (SetOutput), and it
// closes the old one once any write to it in progress has finished, so a
// rotation never cuts a line. Crash safety: the lines still buffered are
// lost on a crash (with a live reader, the last moments'; with a stuck
// one, what could not have been written anyway); a graceful stop flushes
// them after the drain (Proxy.Close), for at most accessFlushTimeout, so a
// stuck reader cannot hold the exit. The writer's state is exported as
// sentry_log_*{log="access"} (lines written and lost, bytes buffered, how
// long the current write has been blocked) and shown on /status.
//
// Lock order: mu, then the writer's (a leaf); the line is formatted into
// mu.buf and copied into the writer under them, the clock read outside.
// Nothing is allocated per line once the buffers have grown.
type accessLog struct {
	cfg     policy.AccessLog
	now     func() time.Time
	lines   [2]prometheus.Counter // by kind: other, rejected
	sampled [2]prometheus.Counter // dropped by the token buckets
	full    [2]prometheus.Counter // dropped: the writer's buffer was full
	out     *logwriter.Writer     // the Proxy's; shared by every accessLog it makes
	mu      struct {
		sync.Mutex
		buf     []byte
		buckets [2]bucket
	}
}

// accessFlushTimeout bounds the flush of the access log when sentry stops.
const accessFlushTimeout = 2 * time.Second

const (
	kindOther = iota
	kindRejected
)

var accessKinds = [2]string{kindOther: "other", kindRejected: "rejected"}

// Reasons for sentry_access_log_dropped_total, a fixed set.
const (
	dropSampled = "sampled"     // the kind's token bucket was empty (log.access rate, reject_rate)
	dropFull    = "buffer_full" // the writer's buffer was full: the output is slow or stuck
)

// bucket is a token bucket of lines; rate 0 never empties.
type bucket struct {
	rate   float64
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	if b.last.IsZero() {
		b.tokens = b.rate
	} else if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.rate, b.tokens+dt*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// newAccessLog makes the access log for cfg, writing through out.
func newAccessLog(cfg policy.AccessLog, m *metrics, now func() time.Time, out *logwriter.Writer) *accessLog {
	l := &accessLog{cfg: cfg, now: now, out: out}
	for k, name := range accessKinds {
		l.lines[k] = m.accessLines.WithLabelValues(name)
		l.sampled[k] = m.accessDropped.WithLabelValues(name, dropSampled)
		l.full[k] = m.accessDropped.WithLabelValues(name, dropFull)
	}
	l.mu.buckets[kindOther].rate = float64(cfg.Rate)
	l.mu.buckets[kindRejected].rate = float64(cfg.RejectRate)
	return l
}

// openOutput opens an access log output: stdout or stderr (wrapped, so
// that the writer, which closes the outputs it replaces, never closes
// them), or a file opened for append (created 0640 if missing).
func openOutput(out string) (io.Writer, error) {
	switch out {
	case "", "stdout":
		return struct{ io.Writer }{os.Stdout}, nil
	case "stderr":
		return struct{ io.Writer }{os.Stderr}, nil
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// closeOutput closes an output opened by openOutput and never handed to
// the writer (a policy refused after it was opened).
func closeOutput(w io.Writer) {
	if c, ok := w.(io.Closer); ok {
		_ = c.Close()
	}
}

// reopen opens the output file again (SIGUSR1, after logrotate moved it)
// and hands it to the writer, which closes the old one after its write in
// progress. Standard streams are left alone.
func (l *accessLog) reopen() error {
	if l.cfg.Output == "stdout" || l.cfg.Output == "stderr" || l.cfg.Output == "" {
		return nil
	}
	w, err := openOutput(l.cfg.Output)
	if err != nil {
		return err
	}
	l.out.SetOutput(w)
	return nil
}

// write logs e, unless its bucket is empty or the writer's buffer is full.
func (l *accessLog) write(e *pipeline.AccessEntry) {
	kind := kindOther
	if e.Outcome == pipeline.OutRejected || e.Outcome == pipeline.OutNoBackend {
		kind = kindRejected
	}
	now := l.now()
	l.mu.Lock()
	if !l.mu.buckets[kind].take(now) {
		l.mu.Unlock()
		l.sampled[kind].Inc()
		return
	}
	if l.cfg.Format == "json" {
		l.mu.buf = appendJSON(l.mu.buf[:0], e)
	} else {
		l.mu.buf = appendText(l.mu.buf[:0], e)
	}
	kept := l.out.TryWrite(l.mu.buf)
	l.mu.Unlock()
	if !kept {
		l.full[kind].Inc()
		return
	}
	l.lines[kind].Inc()
}

// appendText formats e as nginx's combined format followed by key=value
// fields:
//
//	client - - [time] "METHOD URI PROTO" status bytes_out "referer" "agent" host="…" rt=… id=… trace_id=… span_id=… app=… class=… verdict=… reason=… backend=… upstream_time=… bytes_in=…
//
// Quoted values escape '"', '\\' and bytes outside printable ASCII as \xHH,
// as nginx does; "-" stands for an absent value. trace_id is the W3C
// trace ID (pipeline/trace.go), span_id sentry's span when sentry started
// the trace (docs/tracing.md).
func appendText(b []byte, e *pipeline.AccessEntry) []byte {
	b = appendAddr(b, e)
	b = append(b, " - - ["...)
	b = e.Start.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, "] \""...)
	b = appendEsc(b, e.Method)
	b = append(b, ' ')
	b = appendEsc(b, e.URI)
	b = append(b, ' ')
	b = append(b, e.Proto...)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = appendCount(b, e.BytesOut)
	b = append(b, " \""...)
	b = appendEscDash(b, e.Referer)
	b = append(b, "\" \""...)
	b = appendEscDash(b, e.Agent)
	b = append(b, "\" host=\""...)
	b = appendEscDash(b, e.Host)
	b = append(b, "\" rt="...)
	b = strconv.AppendFloat(b, e.Duration.Seconds(), 'f', 6, 64)
	b = append(b, " id="...)
	b = appendEscDash(b, e.ID)
	b = append(b, " trace_id="...)
	b = appendDash(b, e.Trace.TraceID())
	b = append(b, " span_id="...)
	b = appendDash(b, e.Trace.SpanID())
	b = append(b, " app="...)
	b = append(b, appName(e)...)
	b = append(b, " class="...)
	b = append(b, e.ClassName()...)
	b = append(b, " verdict="...)
	b = append(b, e.VerdictName()...)
	b = append(b, " reason="...)
	b = append(b, e.Reason()...)
	b = append(b, " backend="...)
	if e.Backend != nil {
		b = append(b, e.Backend.Addr...)
		b = append(b, " upstream_time="...)
		b = strconv.AppendFloat(b, e.Upstrm.Seconds(), 'f', 6, 64)
	} else {
		b = append(b, "- upstream_time=-"...)
	}
	b = append(b, " bytes_in="...)
	b = appendCount(b, e.BytesIn)
	return append(b, '\n')
}

// appendJSON formats e as one JSON object; durations are seconds (float),
// absent values null.
func appendJSON(b []byte, e *pipeline.AccessEntry) []byte {
	b = append(b, `{"time":"`...)
	b = e.Start.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, `","client":"`...)
	b = appendAddr(b, e)
	b = append(b, `","method":`...)
	b = appendJSONStr(b, e.Method)
	b = append(b, `,"host":`...)
	b = appendJSONStr(b, e.Host)
	b = append(b, `,"uri":`...)
	b = appendJSONStr(b, e.URI)
	b = append(b, `,"proto":"`...)
	b = append(b, e.Proto...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes_in":`...)
	b = appendJSONCount(b, e.BytesIn)
	b = append(b, `,"bytes_out":`...)
	b = appendJSONCount(b, e.BytesOut)
	b = append(b, `,"duration":`...)
	b = strconv.AppendFloat(b, e.Duration.Seconds(), 'f', 6, 64)
	b = append(b, `,"user_agent":`...)
	b = appendJSONStr(b, e.Agent)
	b = append(b, `,"referer":`...)
	b = appendJSONStr(b, e.Referer)
	b = append(b, `,"request_id":`...)
	b = appendJSONStr(b, e.ID)
	b = append(b, `,"trace_id":`...)
	b = appendJSONStr(b, e.Trace.TraceID())
	b = append(b, `,"span_id":`...)
	b = appendJSONStr(b, e.Trace.SpanID())
	b = append(b, `,"app":"`...)
	b = append(b, appName(e)...)
	b = append(b, `","class":"`...)
	b = append(b, e.ClassName()...)
	b = append(b, `","verdict":"`...)
	b = append(b, e.VerdictName()...)
	b = append(b, `","reason":"`...)
	b = append(b, e.Reason()...)
	b = append(b, `","backend":`...)
	if e.Backend != nil {
		b = append(append(append(b, '"'), e.Backend.Addr...), '"')
		b = append(b, `,"upstream_time":`...)
		b = strconv.AppendFloat(b, e.Upstrm.Seconds(), 'f', 6, 64)
	} else {
		b = append(b, `null,"upstream_time":null`...)
	}
	return append(b, "}\n"...)
}

func appName(e *pipeline.AccessEntry) string {
	if e.App == nil {
		return "-"
	}
	return e.App.Name // policy names: [a-z0-9_-], nothing to escape
}

func appendAddr(b []byte, e *pipeline.AccessEntry) []byte {
	if !e.Client.IsValid() {
		return append(b, '-')
	}
	return e.Client.AppendTo(b)
}

func appendCount(b []byte, n int64) []byte {
	if n < 0 {
		return append(b, '-')
	}
	return strconv.AppendInt(b, n, 10)
}

func appendJSONCount(b []byte, n int64) []byte {
	if n < 0 {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, n, 10)
}

// appendDash appends v, which needs no escaping (hex digits), or "-".
func appendDash(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, '-')
	}
	return append(b, v...)
}

func appendEscDash(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, '-')
	}
	return appendEsc(b, v)
}

// appendEsc appends v with '"', '\\', space-free control bytes and bytes
// outside printable ASCII as \xHH (nginx's escaping).
func appendEsc(b, v []byte) []byte {
	for _, c := range v {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b = append(b, '\\', 'x', hexd[c>>4], hexd[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendJSONStr appends v as a JSON string (null when empty). Bytes
// outside printable ASCII are \u00HH, so the line is valid JSON whatever
// the client sent.
func appendJSONStr(b, v []byte) []byte {
	if len(v) == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	for _, c := range v {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

const hexd = "0123456789abcdef"
