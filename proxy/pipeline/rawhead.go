package pipeline

import "bytes"

// rawhead.go is the strict HTTP/1.1 head parser of the event-loop front end
// (package proxy/evloop). It only ever says "this is a plain, unambiguous
// request (or response) head" or "not sure": everything it is not sure
// about goes to fasthttp (requests) or is a bad gateway (responses), so it
// never has to be as forgiving as a general parser, and a head it accepts
// is one every HTTP/1.1 parser reads the same way.

// MaxRawFields bounds the header fields of a head the fast path handles.
const MaxRawFields = 128

// Span is a byte range [s, e) of the buffer a head was parsed from.
type Span struct{ S, E int32 }

func (sp Span) Of(b []byte) []byte { return b[sp.S:sp.E] }

// rawField is one header field: its name and its value without leading or
// trailing whitespace; line is the whole line including CRLF.
type rawField struct {
	Name, Value Span
	Line        Span
}

// RawHead is a parsed head. Spans refer to the parsed buffer.
type RawHead struct {
	N       int // length of the head, through the empty line
	Method  Span
	Target  Span
	Status  int // responses
	Minor   int // HTTP/1.x minor version (responses)
	Fields  [MaxRawFields]rawField
	Kinds   [MaxRawFields]uint8
	NFields int

	ContentLength int64 // -1: none
	Chunked       bool
	ConnClose     bool // Connection: close
	ConnKeepAlive bool // Connection: keep-alive
	ConnOther     bool // Connection lists other tokens
	Host          Span
	ContentType   Span // the first Content-Type (IsGRPC); empty: none
	// AccelBuffering is the first X-Accel-Buffering's value (a backend's
	// "no": its response streams, nginx's convention); empty: none.
	AccelBuffering Span
	HostCount      int
	Expect         bool
	Upgrade        bool
	TeOther        bool // Transfer-Encoding other than exactly "chunked"
}

// ParseResult is what the parser says about a head.
type ParseResult uint8

const (
	HeadOK         ParseResult = iota
	HeadIncomplete             // no empty line yet; may become OK with more bytes
	HeadUnsure                 // not a head the fast path handles
)

var tcharTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// targetTable holds the bytes allowed in an origin-form request target
// that needs no normalisation: no '%' (escapes), no '\\', no controls, no
// spaces, no bytes above 0x7e.
var targetTable = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	t['%'], t['\\'], t['#'] = false, false, false
	return t
}()

// ParseRequestHead parses a request head at the start of b. The fast path
// takes only HTTP/1.1 origin-form requests whose path is already normal
// (no escapes, no dot segments, no empty segments), so the classifier sees
// exactly what fasthttp's normalised path would be.
func ParseRequestHead(b []byte, h *RawHead) ParseResult {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > 0 && bytes.IndexByte(b, '\n') >= 0 && bytes.Contains(b, lflf) {
			return HeadUnsure // bare LF line ends
		}
		return HeadIncomplete
	}
	h.N = end + 4
	// Request line.
	i := 0
	for i < end && tcharTable[b[i]] {
		i++
	}
	if i == 0 || i >= end || b[i] != ' ' {
		return HeadUnsure
	}
	h.Method = Span{0, int32(i)}
	i++
	ts := i
	if i >= end || b[i] != '/' {
		return HeadUnsure // absolute-form, authority-form, "*"
	}
	q := -1
	for i < end && b[i] != ' ' {
		c := b[i]
		if !targetTable[c] {
			return HeadUnsure
		}
		if c == '?' && q < 0 {
			q = i
		}
		i++
	}
	h.Target = Span{int32(ts), int32(i)}
	path := b[ts:i]
	if q >= 0 {
		path = b[ts:q]
	}
	if !NormalPath(path) {
		return HeadUnsure
	}
	if end-i < 9 || string(b[i:i+11]) != " HTTP/1.1\r\n" {
		return HeadUnsure
	}
	i += 11 // past " HTTP/1.1\r\n"
	return parseFields(b, i, end, h)
}

// ParseResponseHead parses a backend's response head at the start of b.
func ParseResponseHead(b []byte, h *RawHead) ParseResult {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		return HeadIncomplete
	}
	h.N = end + 4
	if end < 12 || string(b[:7]) != "HTTP/1." || (b[7] != '0' && b[7] != '1') || b[8] != ' ' {
		return HeadUnsure
	}
	h.Minor = int(b[7] - '0')
	st := 0
	for _, c := range b[9:12] {
		if c < '0' || c > '9' {
			return HeadUnsure
		}
		st = st*10 + int(c-'0')
	}
	if st < 100 {
		return HeadUnsure
	}
	h.Status = st
	i := 12
	if b[i] == ' ' {
		for i < end && b[i] != '\r' {
			if c := b[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return HeadUnsure
			}
			i++
		}
	}
	if b[i] != '\r' || b[i+1] != '\n' {
		return HeadUnsure
	}
	return parseFields(b, i+2, end, h)
}

var (
	crlfcrlf = []byte("\r\n\r\n")
	lflf     = []byte("\n\n")
)

// NormalPath reports whether p (starting with '/') has no empty, "." or
// ".." segments, so path normalisation would leave it unchanged.
func NormalPath(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' || i+1 >= len(p) {
			continue
		}
		switch p[i+1] {
		case '/':
			return false
		case '.':
			r := p[i+2:]
			if len(r) == 0 || r[0] == '/' || r[0] == '.' && (len(r) == 1 || r[1] == '/') {
				return false
			}
		}
	}
	return true
}

// parseFields parses the header lines from i to end (the CRLF before the
// empty line begins at end).
func parseFields(b []byte, i, end int, h *RawHead) ParseResult {
	h.NFields = 0
	h.ContentLength = -1
	h.Chunked, h.ConnClose, h.ConnKeepAlive, h.ConnOther = false, false, false, false
	h.HostCount, h.Expect, h.Upgrade, h.TeOther = 0, false, false, false
	h.Host, h.ContentType, h.AccelBuffering = Span{}, Span{}, Span{}
	for i < end+2 {
		ls := i
		for i < end && tcharTable[b[i]] {
			i++
		}
		if i == ls || i >= end || b[i] != ':' {
			return HeadUnsure // empty name, obs-fold, space before colon, bare LF
		}
		ne := i
		i++
		for i < end && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		vs := i
		for i < end && b[i] != '\r' {
			if c := b[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return HeadUnsure
			}
			i++
		}
		ve := i
		for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
			ve--
		}
		if i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
			return HeadUnsure
		}
		i += 2
		if h.NFields == MaxRawFields {
			return HeadUnsure
		}
		f := &h.Fields[h.NFields]
		f.Name, f.Value, f.Line = Span{int32(ls), int32(ne)}, Span{int32(vs), int32(ve)}, Span{int32(ls), int32(i)}
		k := FieldKind(b[ls:ne])
		h.Kinds[h.NFields] = k
		h.NFields++
		v := b[vs:ve]
		switch k {
		case KindHost:
			h.HostCount++
			h.Host = f.Value
		case KindContentLength:
			// A repeated Content-Length is not sure even when equal:
			// fasthttp refuses it in a request (RFC 9110 §8.6 allows it).
			n, ok := ParseLength(v)
			if !ok || h.ContentLength >= 0 {
				return HeadUnsure
			}
			h.ContentLength = n
		case KindTransferEncoding:
			if h.Chunked || !bytes.EqualFold(v, []byte("chunked")) {
				h.TeOther = true
			}
			h.Chunked = true
		case KindConnection:
			if !connTokens(v, h) {
				return HeadUnsure
			}
		case KindUpgrade:
			h.Upgrade = true
		case KindExpect:
			h.Expect = true
		case KindOther:
			// Kept for the answers sentry makes itself (a gRPC request
			// gets gRPC's form), so they need not parse the head again;
			// a length compare for every other field.
			switch ne - ls {
			case 12:
				if h.ContentType == (Span{}) && EqFold(b[ls:ne], "content-type") {
					h.ContentType = f.Value
				}
			case 17:
				if h.AccelBuffering == (Span{}) && IsAccelBuffering(b[ls:ne]) {
					h.AccelBuffering = f.Value
				}
			}
		}
	}
	return HeadOK
}

// connTokens reads a Connection value; false if it is malformed.
func connTokens(v []byte, h *RawHead) bool {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = bytes.TrimSpace(v[:i]), v[i+1:]
		} else {
			tok, v = bytes.TrimSpace(v), nil
		}
		switch {
		case len(tok) == 0:
		case bytes.EqualFold(tok, []byte("close")):
			h.ConnClose = true
		case bytes.EqualFold(tok, []byte("keep-alive")):
			h.ConnKeepAlive = true
		default:
			h.ConnOther = true
		}
	}
	return true
}

// ParseLength parses a Content-Length value: digits only, at most 18.
func ParseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// FindKind returns the value of the first field of kind k, or nil.
func (h *RawHead) FindKind(b []byte, k uint8) []byte {
	for i := 0; i < h.NFields; i++ {
		if h.Kinds[i] == k {
			return h.Fields[i].Value.Of(b)
		}
	}
	return nil
}

// ChunkTracker follows a chunked body byte by byte to find where it ends;
// the bytes themselves are relayed unchanged.
type ChunkTracker struct {
	state  uint8
	size   int64 // remaining data bytes in csData; the size being read in csSize
	digits int
}

const (
	csSize = iota
	csExt
	csSizeLF
	csData
	csDataCR
	csDataLF
	csTrailerStart
	csTrailerLine
	csTrailerLF
	csEndLF
	csDone
)

// Feed consumes b and returns how many bytes belong to the body and
// whether the body ended there; ok is false on a malformed body.
func (t *ChunkTracker) Feed(b []byte) (n int, done, ok bool) {
	_, n, done, ok = t.feed(nil, b, false)
	return n, done, ok
}

// Decode is Feed that also appends the body's data (the chunks' contents,
// without sizes, extensions or trailers) to dst: what an HTTP/2 response
// carries as DATA.
func (t *ChunkTracker) Decode(dst, b []byte) (out []byte, n int, done, ok bool) {
	return t.feed(dst, b, true)
}

func (t *ChunkTracker) feed(dst, b []byte, keep bool) (out []byte, n int, done, ok bool) {
	for n < len(b) {
		c := b[n]
		switch t.state {
		case csSize:
			switch {
			case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
				if t.digits == 15 {
					return dst, n, false, false
				}
				t.digits++
				t.size = t.size<<4 | int64(hexVal(c))
			case t.digits == 0:
				return dst, n, false, false
			case c == ';' || c == ' ' || c == '\t':
				t.state = csExt
			case c == '\r':
				t.state = csSizeLF
			default:
				return dst, n, false, false
			}
		case csExt:
			if c == '\r' {
				t.state = csSizeLF
			} else if c < 0x20 && c != '\t' {
				return dst, n, false, false
			}
		case csSizeLF:
			if c != '\n' {
				return dst, n, false, false
			}
			t.digits = 0
			if t.size == 0 {
				t.state = csTrailerStart
			} else {
				t.state = csData
			}
		case csData:
			k := int64(len(b) - n)
			if k > t.size {
				k = t.size
			}
			if keep {
				dst = append(dst, b[n:n+int(k)]...)
			}
			n += int(k)
			t.size -= k
			if t.size == 0 {
				t.state = csDataCR
			}
			continue
		case csDataCR:
			if c != '\r' {
				return dst, n, false, false
			}
			t.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return dst, n, false, false
			}
			t.state = csSize
		case csTrailerStart:
			// A trailer line ends in CRLF, as a head's line does (RFC
			// 9112 §7.1.2, §2.2): a bare LF is not taken for a line's
			// end -- a parser that did would read what follows as
			// something else than we do -- and a line starts with a
			// field name (no obs-fold, no controls).
			switch {
			case c == '\r':
				t.state = csEndLF
			case tcharTable[c]:
				t.state = csTrailerLine
			default:
				return dst, n, false, false
			}
		case csTrailerLine:
			switch {
			case c == '\r':
				t.state = csTrailerLF
			case c < 0x20 && c != '\t' || c == 0x7f:
				return dst, n, false, false
			}
		case csTrailerLF:
			if c != '\n' {
				return dst, n, false, false
			}
			t.state = csTrailerStart
		case csEndLF:
			if c != '\n' {
				return dst, n, false, false
			}
			t.state = csDone
			return dst, n + 1, true, true
		}
		n++
	}
	return dst, n, false, true
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// foldByte is c in lower case if it is an ASCII upper-case letter.
func foldByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// EqFoldString compares b with s ignoring ASCII case (both sides).
func EqFoldString(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := foldByte(b[i]), foldByte(s[i])
		if x != y {
			return false
		}
	}
	return true
}

// CookieValue returns the value of cookie name in a Cookie header value
// ("a=1; b=2"), without surrounding double quotes, or nil. Name and value
// are read as fasthttp reads them (spaces around each trimmed).
func CookieValue(v []byte, name string) []byte {
	for len(v) > 0 {
		var pair []byte
		if i := bytes.IndexByte(v, ';'); i >= 0 {
			pair, v = v[:i], v[i+1:]
		} else {
			pair, v = v, nil
		}
		eq := bytes.IndexByte(pair, '=')
		if eq < 0 || string(trimSpaces(pair[:eq])) != name {
			continue
		}
		val := trimSpaces(pair[eq+1:])
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		return val
	}
	return nil
}

// trimSpaces trims spaces (only) at both ends of b, keeping it non-nil.
func trimSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// Peek returns the value of the first field named name, any case.
func (h *RawHead) Peek(b []byte, name string) []byte {
	for i := 0; i < h.NFields; i++ {
		f := &h.Fields[i]
		if EqFoldString(f.Name.Of(b), name) {
			return f.Value.Of(b)
		}
	}
	return nil
}

// IsAccelBuffering tells whether a header name is X-Accel-Buffering: a
// backend's word on whether its response may be buffered (nginx's
// convention), which sentry reads and, as nginx, does not pass on.
func IsAccelBuffering(name []byte) bool {
	return len(name) == 17 && EqFold(name, "x-accel-buffering")
}
