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
type replyField = pipeline.Field

// replyFields lists the fields of r in the order both forms write them
// (pipeline.AppendReplyFields), with the request ID (reqID: id) when id
// is not empty. The list and its numbers are the loop's scratch, valid
// until the next call.
func (l *eventLoop) replyFields(r *pipeline.Reply, reqID string, id []byte) []replyField {
	l.rid = append(l.rid[:0], reqID...)
	l.rf, l.rnum = pipeline.AppendReplyFields(l.rf[:0], l.rnum, r, l.httpDate(), l.rid, id)
	return l.rf
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
		out = append(append(append(append(out, "\r\n"...), f.Name...), ": "...), f.Value...)
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
