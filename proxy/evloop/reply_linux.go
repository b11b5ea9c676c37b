//go:build linux

package evloop

import (
	"strconv"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// pipeline.AppendReply appends r as a raw HTTP/1.1 response: the same status line,
// headers and body fasthttp writes for writeReply, plus the request ID
// (when id is not empty), Connection: close when closing, and no body for
// a HEAD request (its Content-Length still says the length).
func appendReply(out []byte, r *pipeline.Reply, date []byte, reqID string, id []byte, closing, head bool) []byte {
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(r.Status), 10)
	out = append(out, ' ')
	out = append(out, fasthttp.StatusMessage(r.Status)...)
	out = append(out, "\r\nDate: "...)
	out = append(out, date...)
	if r.GRPC != 0 {
		// gRPC's form (pipeline.Reply.GRPC), in the head: the same
		// fields as writeReply's.
		out = append(out, "\r\nContent-Type: application/grpc\r\nContent-Length: 0\r\nGrpc-Status: "...)
		out = append(out, pipeline.GRPCStatusBytes(r.GRPC)...)
		out = append(append(out, "\r\nGrpc-Message: "...), r.GRPCMessage...)
		out = strconv.AppendInt(append(out, "\r\nGrpc-Retry-Pushback-Ms: "...), r.Pushback, 10)
	} else {
		out = append(out, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(r.Body)), 10)
	}
	if r.Retry >= 0 {
		out = append(append(out, "\r\nRetry-After: "...), pipeline.RetryAfterBytes(r.Retry)...)
	}
	if r.Verdict != nil {
		out = append(append(out, "\r\nX-Sentry-Reject: "...), r.Verdict...)
	}
	if len(id) > 0 {
		out = append(append(append(append(out, "\r\n"...), reqID...), ": "...), id...)
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
