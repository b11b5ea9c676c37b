package proxy

import (
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
// (sentry_access_log_dropped_total{kind}); so under a flood the log's own
// rate is bounded by rate + reject_rate whatever the request rate, and the
// counters say how much was left out. Below the rates every line is
// written. Decision: a token bucket rather than "1 in N", because the
// bound then holds for any load, and a quiet service logs everything.
//
// Lock order: mu only; the line is formatted and written under it (one
// write call per line, so lines never interleave), the clock read outside.
type accessLog struct {
	cfg     policy.AccessLog
	now     func() time.Time
	lines   [2]prometheus.Counter // by kind: other, rejected
	dropped [2]prometheus.Counter
	mu      struct {
		sync.Mutex
		w       io.Writer
		f       *os.File // nil: stdout or stderr
		buf     []byte
		buckets [2]bucket
	}
}

const (
	kindOther = iota
	kindRejected
)

var accessKinds = [2]string{kindOther: "other", kindRejected: "rejected"}

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

// openAccessLog opens cfg's output. A file is opened for append (created
// 0640 if missing).
func openAccessLog(cfg policy.AccessLog, m *metrics, now func() time.Time) (*accessLog, error) {
	l := &accessLog{cfg: cfg, now: now}
	for k, name := range accessKinds {
		l.lines[k] = m.accessLines.WithLabelValues(name)
		l.dropped[k] = m.accessDropped.WithLabelValues(name)
	}
	l.mu.buckets[kindOther].rate = float64(cfg.Rate)
	l.mu.buckets[kindRejected].rate = float64(cfg.RejectRate)
	w, f, err := openOutput(cfg.Output)
	if err != nil {
		return nil, err
	}
	l.mu.w, l.mu.f = w, f
	return l, nil
}

func openOutput(out string) (io.Writer, *os.File, error) {
	switch out {
	case "", "stdout":
		return os.Stdout, nil, nil
	case "stderr":
		return os.Stderr, nil, nil
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, nil, err
	}
	return f, f, nil
}

// reopen opens the output file again (SIGUSR1, after logrotate moved it).
// Standard streams are left alone.
func (l *accessLog) reopen() error {
	if l.cfg.Output == "stdout" || l.cfg.Output == "stderr" || l.cfg.Output == "" {
		return nil
	}
	w, f, err := openOutput(l.cfg.Output)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.mu.f
	l.mu.w, l.mu.f = w, f
	l.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

// close closes a file output.
func (l *accessLog) close() {
	l.mu.Lock()
	f := l.mu.f
	l.mu.f, l.mu.w = nil, io.Discard
	l.mu.Unlock()
	if f != nil {
		_ = f.Close()
	}
}

// write logs e, unless its bucket is empty.
func (l *accessLog) write(e *pipeline.AccessEntry) {
	kind := kindOther
	if e.Outcome == pipeline.OutRejected || e.Outcome == pipeline.OutNoBackend {
		kind = kindRejected
	}
	now := l.now()
	l.mu.Lock()
	if !l.mu.buckets[kind].take(now) {
		l.mu.Unlock()
		l.dropped[kind].Inc()
		return
	}
	if l.cfg.Format == "json" {
		l.mu.buf = appendJSON(l.mu.buf[:0], e)
	} else {
		l.mu.buf = appendText(l.mu.buf[:0], e)
	}
	_, _ = l.mu.w.Write(l.mu.buf)
	l.mu.Unlock()
	l.lines[kind].Inc()
}

// appendText formats e as nginx's combined format followed by key=value
// fields:
//
//	client - - [time] "METHOD URI PROTO" status bytes_out "referer" "agent" host="…" rt=… id=… app=… class=… verdict=… reason=… backend=… upstream_time=… bytes_in=…
//
// Quoted values escape '"', '\\' and bytes outside printable ASCII as \xHH,
// as nginx does; "-" stands for an absent value.
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
