package exchange

import "github.com/sentry-proxy/sentry/proxy/pipeline"

// stream.go: the neutral head of an HTTP/2 stream's request, for every
// driver that serves h2 streams (the event loops' stream connections,
// the h2 workers' goroutine driver).

// Stream is an HTTP/2 stream's decoded head as the core reads it: what
// proxy/h2srv's Stream offers, without the core importing the codec.
// Spans are offsets into Arena.
type Stream interface {
	Arena() []byte
	HeadSpans() (method, path, authority [2]int32)
	NumFields() int
	FieldSpans(i int) (name, value [2]int32)
}

// StreamHead is the neutral head of s's request, for app a, its fields
// in h: spans over the stream's arena, Host from :authority, without the
// fields the header policy never passes on from h2 (pipeline.H2Skip). ok
// is false when the core's drivers do not serve it: when the HTTP/1.1
// request the head stands for -- the request line, Host, those fields
// and the cookies joined -- is one the HTTP/1.1 path would not (the
// strict parser's target, one Content-Length of at most 18 digits, a
// valid Host, at most pipeline.MaxRawFields lines) or is longer than
// maxSize; its length is Size (the access log's bytes in). The cookie
// fields are kept apart (the request writer joins them), so they count
// one by one against h's pipeline.MaxRawFields. TLS is the caller's to
// set.
func StreamHead(s Stream, a *pipeline.App, h *pipeline.RawHead, maxSize int) (Head, bool) {
	ar := s.Arena()
	m, p, au := s.HeadSpans()
	h.Method, h.Target, h.Host = span(m), span(p), span(au)
	if !pipeline.TargetOK(h.Target.Of(ar)) || !pipeline.ValidHost(h.Host.Of(ar)) {
		return Head{}, false
	}
	// The request line, Host, and the empty line: "M P HTTP/1.1\r\nHost: A\r\n\r\n".
	size := int(m[1]-m[0]) + int(p[1]-p[0]) + int(au[1]-au[0]) + 1 + len(" HTTP/1.1\r\nHost: \r\n\r\n")
	lines, cookies := 1, 0
	h.NFields, h.ContentLength, h.ContentType = 0, -1, pipeline.Span{}
	for i := range s.NumFields() {
		ns, vs := s.FieldSpans(i)
		name, v := span(ns), span(vs)
		n := name.Of(ar)
		if string(n) == "cookie" {
			if cookies++; cookies == 1 {
				size += len("cookie: \r\n")
				lines++
			} else {
				size += len("; ")
			}
			size += int(vs[1] - vs[0])
		} else {
			if pipeline.H2Skip(n, a.ReqID, a.LoadHeader) {
				continue
			}
			size += int(ns[1]-ns[0]) + int(vs[1]-vs[0]) + len(": \r\n")
			lines++
		}
		if h.NFields == pipeline.MaxRawFields {
			return Head{}, false
		}
		k := pipeline.FieldKind(n)
		switch k {
		case pipeline.KindContentLength:
			// (h2srv checked the digits, and that a head that ends the
			// stream declares no body.)
			if h.ContentLength >= 0 || vs[1]-vs[0] > 18 {
				return Head{}, false
			}
			h.ContentLength = 0
		case pipeline.KindOther:
			if h.ContentType == (pipeline.Span{}) && string(n) == "content-type" {
				h.ContentType = v
			}
		}
		h.Fields[h.NFields].Name, h.Fields[h.NFields].Value, h.Fields[h.NFields].Line = name, v, pipeline.Span{}
		h.Kinds[h.NFields] = k
		h.NFields++
	}
	if lines > pipeline.MaxRawFields || size > maxSize {
		return Head{}, false
	}
	h.N, h.HostCount = size, 1
	return Head{B: ar, Raw: h, H2: true, Size: int64(size)}, true
}

// span is an h2srv offset pair as a pipeline.Span.
func span(o [2]int32) pipeline.Span { return pipeline.Span{S: o[0], E: o[1]} }
