//go:build linux

package evloop

import (
	"strconv"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// reply_linux.go: the answers sentry writes itself (pipeline.Reply, as
// the exchange core decided it), in both forms: HTTP/1.1 bytes
// (appendReply) and an h2 stream's HEADERS and DATA (streamReply,
// h2_linux.go), from one list of fields (replyFields).

// replyField is one field of an answer sentry writes itself.
type replyField struct{ name, value []byte }

var (
	hdrDate         = []byte("Date")
	hdrContentType  = []byte("Content-Type")
	hdrContentLen   = []byte("Content-Length")
	hdrGRPCStatus   = []byte("Grpc-Status")
	hdrGRPCMessage  = []byte("Grpc-Message")
	hdrGRPCPushback = []byte("Grpc-Retry-Pushback-Ms")
	hdrRetryAfter   = []byte("Retry-After")
	hdrReject       = []byte("X-Sentry-Reject")
	strGRPC         = []byte("application/grpc")
	strTextPlain    = []byte("text/plain; charset=utf-8")
	strZero         = []byte("0")
)

// replyFields lists the fields of r in the order both forms write them --
// the same fields fasthttp's writeReply sets: Date, then gRPC's form
// (pipeline.Reply.GRPC: content-type, an empty body, grpc-status,
// grpc-message, grpc-retry-pushback-ms) or the plain one's content-type
// and length, Retry-After, X-Sentry-Reject, and the request ID (reqID: id)
// when id is not empty. The list and its numbers are the loop's scratch,
// valid until the next call.
func (l *eventLoop) replyFields(r *pipeline.Reply, reqID string, id []byte) []replyField {
	f, num := l.rf[:0], l.rnum[:0]
	f = append(f, replyField{hdrDate, l.httpDate()})
	if r.GRPC != 0 {
		num = strconv.AppendInt(num, r.Pushback, 10)
		f = append(f, replyField{hdrContentType, strGRPC}, replyField{hdrContentLen, strZero},
			replyField{hdrGRPCStatus, pipeline.GRPCStatusBytes(r.GRPC)}, replyField{hdrGRPCMessage, r.GRPCMessage},
			replyField{hdrGRPCPushback, num})
	} else {
		num = strconv.AppendInt(num, int64(len(r.Body)), 10)
		f = append(f, replyField{hdrContentType, strTextPlain}, replyField{hdrContentLen, num})
	}
	if r.Retry >= 0 {
		f = append(f, replyField{hdrRetryAfter, pipeline.RetryAfterBytes(r.Retry)})
	}
	if r.Verdict != nil {
		f = append(f, replyField{hdrReject, r.Verdict})
	}
	l.rid = append(l.rid[:0], reqID...)
	if len(id) > 0 {
		f = append(f, replyField{l.rid, id})
	}
	l.rf, l.rnum = f, num
	return f
}

// appendReply appends r as a raw HTTP/1.1 response: the same status line,
// headers and body fasthttp writes for writeReply (its status text,
// fasthttp.StatusMessage, byte for byte), plus the request ID (when id is
// not empty), Connection: close when closing, and no body for a HEAD
// request (its Content-Length still says the length).
func (l *eventLoop) appendReply(out []byte, r *pipeline.Reply, reqID string, id []byte, closing, head bool) []byte {
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(r.Status), 10)
	out = append(out, ' ')
	out = append(out, fasthttp.StatusMessage(r.Status)...)
	for _, f := range l.replyFields(r, reqID, id) {
		out = append(append(append(append(out, "\r\n"...), f.name...), ": "...), f.value...)
	}
	if closing {
		out = append(out, "\r\nConnection: close"...)
	}
	out = append(out, "\r\n\r\n"...)
	if !head {
		out = append(out, r.Body...)
	}
	return out
}
