package exchange

import (
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// head.go: the neutral request head, and the classifier's view of it.

// Head is a request head as the core reads it, whatever protocol it came
// in: method, target, authority and fields as spans (pipeline.RawHead's)
// over a buffer its driver owns, plus the facts the core needs. It is not
// HTTP/1.1 text and not a fasthttp type.
//
// An HTTP/1.1 driver parses the bytes it read (pipeline.ParseRequestHead):
// B is its read buffer, and each field keeps its whole line (Line), so
// that the backend gets the client's own bytes. An HTTP/2 driver fills
// Raw from a stream's decoded head: B is the stream's arena, Host is
// :authority (there is no host field), each field has a name and a value
// but no line, and the fields the header policy never lets through on h2
// (connection-specific ones, underscore spellings of sentry's names) are
// left out; cookie fields stay apart (Peek and the request writer join
// them, RFC 9113 §8.2.3).
//
// The spans stay valid while the exchange runs: the driver keeps B as it
// is (an HTTP/1.1 driver's next request waits behind this one; a
// stream's arena lives until the stream is released).
type Head struct {
	B    []byte            // the buffer Raw's spans index
	Raw  *pipeline.RawHead // method, target, Host, fields and their kinds, facts
	Body []byte            // the request body, whole (the drivers take no other)
	H2   bool              // an HTTP/2 stream's head (see above)
	TLS  bool              // the client's connection is TLS (X-Forwarded-Proto: https)
	Size int64             // the request's size as the access log counts it (head and body)
}

// Method is the request's method.
func (h *Head) Method() []byte { return h.Raw.Method.Of(h.B) }

// Target is the request target as the client sent it (origin-form).
func (h *Head) Target() []byte { return h.Raw.Target.Of(h.B) }

// Host is the Host field's value (HTTP/1.1) or :authority (h2).
func (h *Head) Host() []byte { return h.Raw.Host.Of(h.B) }

// Name and Value are field i's.
func (h *Head) Name(i int) []byte  { return h.Raw.Fields[i].Name.Of(h.B) }
func (h *Head) Value(i int) []byte { return h.Raw.Fields[i].Value.Of(h.B) }

// Peek is the value of the first field named name (any case), nil when
// there is none. On h2 "host" is :authority, and "cookie" is every
// cookie field's value joined with "; " (in the view's scratch).
func (v *view) Peek(name string) []byte {
	h := v.h
	if h.H2 {
		switch {
		case pipeline.EqFoldString([]byte(name), "host"):
			return h.Host()
		case pipeline.EqFoldString([]byte(name), "cookie"):
			return v.cookies()
		}
	}
	return h.Raw.Peek(h.B, name)
}

// view is the classifier's view of a head (classify.Request), kept in
// the driver's Scratch.
type view struct {
	h      *Head
	cookie []byte // h2: the cookie fields joined (Peek)
}

func (v *view) Method() []byte { return v.h.Method() }

func (v *view) Path() []byte {
	t := v.h.Target()
	for i, c := range t {
		if c == '?' {
			return t[:i]
		}
	}
	return t
}

func (v *view) Host() []byte { return v.h.Host() }

func (v *view) Cookie(name string) []byte {
	h := v.h
	for i := 0; i < h.Raw.NFields; i++ {
		if !pipeline.EqFold(h.Name(i), "cookie") {
			continue
		}
		if val := pipeline.CookieValue(h.Value(i), name); val != nil {
			return val
		}
	}
	return nil
}

// cookies joins an h2 head's cookie fields, as HTTP/1.1 carries them.
func (v *view) cookies() []byte {
	h := v.h
	n, first := 0, -1
	for i := 0; i < h.Raw.NFields; i++ {
		if isCookie(h, i) {
			if n++; first < 0 {
				first = i
			}
		}
	}
	if n <= 1 {
		if first < 0 {
			return nil
		}
		return h.Value(first)
	}
	// (As the HTTP/1.1 line reads: without trailing blanks, which an
	// empty last cookie leaves.)
	c := appendCookies(v.cookie[:0], h)
	v.cookie = c
	for len(c) > 0 && (c[len(c)-1] == ' ' || c[len(c)-1] == '\t') {
		c = c[:len(c)-1]
	}
	return c
}

// isCookie tells whether field i of an h2 head is a cookie (h2 names are
// lower case).
func isCookie(h *Head, i int) bool { return string(h.Name(i)) == "cookie" }

// appendCookies appends an h2 head's cookie values joined with "; ".
func appendCookies(b []byte, h *Head) []byte {
	first := true
	for i := 0; i < h.Raw.NFields; i++ {
		if isCookie(h, i) {
			if !first {
				b = append(b, "; "...)
			}
			first = false
			b = append(b, h.Value(i)...)
		}
	}
	return b
}
