package proxy

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// h2Transcript sends one request on a fresh h2c connection to addr
// (h2cRequest: fields, then body) and writes
// down everything the client gets on its stream until the server has
// nothing more for it (a PING's answer after the stream's end): the
// head's fields in order (date and the request ID's value masked), the
// DATA, END_STREAM and any RST_STREAM.
func h2Transcript(t *testing.T, addr string, body []byte, fields ...string) string {
	t.Helper()
	fr := h2cRequest(t, addr, body, fields...)
	dec := hpack.NewDecoder(4096, nil)
	var out strings.Builder
	ended, pinged := false, false
	for range 1000 {
		f, err := fr.ReadFrame()
		if err != nil {
			fmt.Fprintf(&out, "read error %v\n", err)
			break
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			hf, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, h := range hf {
				v := h.Value
				if h.Name == "date" || h.Name == "x-request-id" {
					v = fmt.Sprintf("<%d bytes>", len(v))
				}
				fmt.Fprintf(&out, "%s: %s\n", h.Name, v)
			}
			if f.StreamEnded() {
				out.WriteString("END_STREAM\n")
				ended = true
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			fmt.Fprintf(&out, "DATA %q\n", f.Data())
			if f.StreamEnded() {
				out.WriteString("END_STREAM\n")
				ended = true
			}
		case *http2.RSTStreamFrame:
			fmt.Fprintf(&out, "RST_STREAM %v\n", f.ErrCode)
			ended = true
		case *http2.PingFrame:
			if f.IsAck() {
				return out.String()
			}
		case *http2.GoAwayFrame:
			fmt.Fprintf(&out, "GOAWAY %v\n", f.ErrCode)
			return out.String()
		}
		if ended && !pinged {
			pinged = true
			_ = fr.WritePing(false, [8]byte{1})
		}
	}
	return out.String()
}

// counters lists the proxy's counters and histogram counts that are not
// zero, of the families whose name has one of prefixes, one
// "name{labels} value" a line, sorted.
func counters(t *testing.T, reg *prometheus.Registry, prefixes ...string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(mf.GetName(), p) }) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Histogram != nil:
				v = float64(m.Histogram.GetSampleCount())
			default:
				continue
			}
			if v != 0 {
				lines = append(lines, fmt.Sprintf("%s{%s} %v", mf.GetName(), strings.Join(ls, ","), v))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestH2WorkerStreamCapsOnTheCore: on both engines, an h2c stream whose
// body max_body_bytes refuses (413 for a content-length over it, 411 for
// a body without one, a gRPC request's too) is answered by the exchange
// core's Refuse on the goroutine driver, before anything of its body is
// read: the status, body, reason and metrics of the fake-RequestCtx path
// it replaces, with the head of every answer sentry makes on an h2 stream
// (date, content-type, content-length, the request ID), END_STREAM, and
// RST_STREAM NO_ERROR for a body the client had not ended. The access
// line is unclassified, names the client's trace (docs/tracing.md) and
// counts the declared length in bytes_in; nothing reaches the backend.
func TestH2WorkerStreamCapsOnTheCore(t *testing.T) {
	const (
		tooLarge = "sentry: request body larger than this app accepts\n"
		lenReq   = "sentry: this app limits body size; send Content-Length instead of a chunked body\n"
		trace    = "0af7651916cd43dd8448eb211c80319c"
	)
	answer := func(status, body string, rst bool) string {
		s := fmt.Sprintf(":status: %s\ndate: <29 bytes>\ncontent-type: text/plain; charset=utf-8\ncontent-length: %d\n"+
			"x-request-id: <32 bytes>\nDATA %q\nEND_STREAM\n", status, len(body), body)
		if rst {
			s += "RST_STREAM NO_ERROR\n"
		}
		return s
	}
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			be := startCoreBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			path := filepath.Join(t.TempDir(), "access.log")
			on := accessSnap(path, "text", 0, 0)
			h := startEngine(t, e, []string{be.addr}, Options{Control: &fakeControl{}}, func(s *policy.Snapshot, a *policy.App) {
				on(s, a)
				a.H2C = true
				a.MaxBodyBytes = 100
			})
			head := []string{":method", "POST", ":scheme", "http", ":authority", "a.test", ":path", "/cap?x=1",
				"user-agent", "probe/1", "x-class", "gold", "traceparent", "00-" + trace + "-b7ad6b7169203331-01"}
			cases := []struct {
				fields []string
				body   []byte // empty: none sent, the stream left open
				want   string
			}{
				{[]string{"content-length", "200"}, bytes.Repeat([]byte("x"), 200), answer("413", tooLarge, false)},
				{nil, []byte("hello"), answer("411", lenReq, false)},
				{[]string{"content-length", "200"}, []byte{}, answer("413", tooLarge, true)},
				{nil, []byte{}, answer("411", lenReq, true)},
				{[]string{"content-type", "application/grpc"}, []byte("hello"), answer("411", lenReq, false)},
			}
			for i, c := range cases {
				got := h2Transcript(t, h.addr, c.body, append(append([]string(nil), head...), c.fields...)...)
				if got != c.want {
					t.Errorf("case %d: got\n%s\nwant\n%s", i, got, c.want)
				}
			}
			syncAccess(t, h.p)
			lines := readLines(t, path)
			if len(lines) != len(cases) {
				t.Fatalf("%d access lines, want %d:\n%s", len(lines), len(cases), strings.Join(lines, "\n"))
			}
			bytesIn := make([]int, len(lines))
			for i, l := range lines {
				status, reason := "413", "body_too_large"
				if cases[i].fields == nil || cases[i].fields[0] != "content-length" {
					status, reason = "411", "length_required"
				}
				for _, w := range []string{`"POST /cap?x=1 HTTP/2.0" ` + status + " ", ` "-" "probe/1" host="a.test" `, " trace_id=" + trace + " ",
					" app=web class=- verdict=- reason=" + reason + " backend=- upstream_time=- bytes_in="} {
					if !strings.Contains(l, w) {
						t.Errorf("line %d %q lacks %q", i, l, w)
					}
				}
				fmt.Sscanf(l[strings.LastIndex(l, "bytes_in=")+len("bytes_in="):], "%d", &bytesIn[i])
			}
			if d := bytesIn[0] - bytesIn[1]; d != 200+len("content-length: 200\r\n") {
				t.Errorf("bytes_in %v: the 413's declared length is not counted in", bytesIn)
			}
			want := strings.Join([]string{
				"sentry_access_log_lines_total{kind=other} 5",
				"sentry_proxy_errors_total{app=web,reason=body_too_large} 2",
				"sentry_proxy_errors_total{app=web,reason=length_required} 3",
				"sentry_request_duration_seconds{app=web,result=error} 5",
				"sentry_requests_total{app=web,backend=none,code=4xx} 5",
			}, "\n")
			got := counters(t, h.reg, "sentry_access_log_lines", "sentry_proxy_errors", "sentry_request", "sentry_client_errors", "sentry_admission")
			if got != want {
				t.Errorf("metrics:\n%s\nwant\n%s", got, want)
			}
			be.mu.Lock()
			defer be.mu.Unlock()
			if len(be.reqs) != 0 {
				t.Errorf("the backend got %q", be.reqs)
			}
		})
	}
}
