package proxy

import "bytes"

// rawhead.go is the strict HTTP/1.1 head parser of the event-loop front end
// (evloop_linux.go). It only ever says "this is a plain, unambiguous
// request (or response) head" or "not sure": everything it is not sure
// about goes to fasthttp (requests) or is a bad gateway (responses), so it
// never has to be as forgiving as a general parser, and a head it accepts
// is one every HTTP/1.1 parser reads the same way.

// maxRawFields bounds the header fields of a head the fast path handles.
const maxRawFields = 128

// span is a byte range [s, e) of the buffer a head was parsed from.
type span struct{ s, e int32 }

func (sp span) of(b []byte) []byte { return b[sp.s:sp.e] }

// rawField is one header field: its name and its value without leading or
// trailing whitespace; line is the whole line including CRLF.
type rawField struct {
	name, value span
	line        span
}

// rawHead is a parsed head. Spans refer to the parsed buffer.
type rawHead struct {
	n       int // length of the head, through the empty line
	method  span
	target  span
	status  int // responses
	minor   int // HTTP/1.x minor version (responses)
	fields  [maxRawFields]rawField
	kinds   [maxRawFields]uint8
	nfields int

	contentLength int64 // -1: none
	chunked       bool
	connClose     bool // Connection: close
	connKeepAlive bool // Connection: keep-alive
	connOther     bool // Connection lists other tokens
	host          span
	hostCount     int
	expect        bool
	upgrade       bool
	teOther       bool // Transfer-Encoding other than exactly "chunked"
}

// parseResult is what the parser says about a head.
type parseResult uint8

const (
	headOK         parseResult = iota
	headIncomplete             // no empty line yet; may become OK with more bytes
	headUnsure                 // not a head the fast path handles
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

// parseRequestHead parses a request head at the start of b. The fast path
// takes only HTTP/1.1 origin-form requests whose path is already normal
// (no escapes, no dot segments, no empty segments), so the classifier sees
// exactly what fasthttp's normalised path would be.
func parseRequestHead(b []byte, h *rawHead) parseResult {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > 0 && bytes.IndexByte(b, '\n') >= 0 && bytes.Contains(b, lflf) {
			return headUnsure // bare LF line ends
		}
		return headIncomplete
	}
	h.n = end + 4
	// Request line.
	i := 0
	for i < end && tcharTable[b[i]] {
		i++
	}
	if i == 0 || i >= end || b[i] != ' ' {
		return headUnsure
	}
	h.method = span{0, int32(i)}
	i++
	ts := i
	if i >= end || b[i] != '/' {
		return headUnsure // absolute-form, authority-form, "*"
	}
	q := -1
	for i < end && b[i] != ' ' {
		c := b[i]
		if !targetTable[c] {
			return headUnsure
		}
		if c == '?' && q < 0 {
			q = i
		}
		i++
	}
	h.target = span{int32(ts), int32(i)}
	path := b[ts:i]
	if q >= 0 {
		path = b[ts:q]
	}
	if !normalPath(path) {
		return headUnsure
	}
	if end-i < 9 || string(b[i:i+11]) != " HTTP/1.1\r\n" {
		return headUnsure
	}
	i += 11 // past " HTTP/1.1\r\n"
	return parseFields(b, i, end, h)
}

// parseResponseHead parses a backend's response head at the start of b.
func parseResponseHead(b []byte, h *rawHead) parseResult {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		return headIncomplete
	}
	h.n = end + 4
	if end < 12 || string(b[:7]) != "HTTP/1." || (b[7] != '0' && b[7] != '1') || b[8] != ' ' {
		return headUnsure
	}
	h.minor = int(b[7] - '0')
	st := 0
	for _, c := range b[9:12] {
		if c < '0' || c > '9' {
			return headUnsure
		}
		st = st*10 + int(c-'0')
	}
	if st < 100 {
		return headUnsure
	}
	h.status = st
	i := 12
	if b[i] == ' ' {
		for i < end && b[i] != '\r' {
			if c := b[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return headUnsure
			}
			i++
		}
	}
	if b[i] != '\r' || b[i+1] != '\n' {
		return headUnsure
	}
	return parseFields(b, i+2, end, h)
}

var (
	crlfcrlf = []byte("\r\n\r\n")
	lflf     = []byte("\n\n")
)

// normalPath reports whether p (starting with '/') has no empty, "." or
// ".." segments, so path normalisation would leave it unchanged.
func normalPath(p []byte) bool {
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
func parseFields(b []byte, i, end int, h *rawHead) parseResult {
	h.nfields = 0
	h.contentLength = -1
	h.chunked, h.connClose, h.connKeepAlive, h.connOther = false, false, false, false
	h.hostCount, h.expect, h.upgrade, h.teOther = 0, false, false, false
	h.host = span{}
	for i < end+2 {
		ls := i
		for i < end && tcharTable[b[i]] {
			i++
		}
		if i == ls || i >= end || b[i] != ':' {
			return headUnsure // empty name, obs-fold, space before colon, bare LF
		}
		ne := i
		i++
		for i < end && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		vs := i
		for i < end && b[i] != '\r' {
			if c := b[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return headUnsure
			}
			i++
		}
		ve := i
		for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
			ve--
		}
		if i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
			return headUnsure
		}
		i += 2
		if h.nfields == maxRawFields {
			return headUnsure
		}
		f := &h.fields[h.nfields]
		f.name, f.value, f.line = span{int32(ls), int32(ne)}, span{int32(vs), int32(ve)}, span{int32(ls), int32(i)}
		k := fieldKind(b[ls:ne])
		h.kinds[h.nfields] = k
		h.nfields++
		v := b[vs:ve]
		switch k {
		case hHost:
			h.hostCount++
			h.host = f.value
		case hContentLength:
			// A repeated Content-Length is not sure even when equal:
			// fasthttp refuses it in a request (RFC 9110 §8.6 allows it).
			n, ok := parseLength(v)
			if !ok || h.contentLength >= 0 {
				return headUnsure
			}
			h.contentLength = n
		case hTransferEncoding:
			if h.chunked || !bytes.EqualFold(v, []byte("chunked")) {
				h.teOther = true
			}
			h.chunked = true
		case hConnection:
			if !connTokens(v, h) {
				return headUnsure
			}
		case hUpgrade:
			h.upgrade = true
		case hExpect:
			h.expect = true
		}
	}
	return headOK
}

// connTokens reads a Connection value; false if it is malformed.
func connTokens(v []byte, h *rawHead) bool {
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
			h.connClose = true
		case bytes.EqualFold(tok, []byte("keep-alive")):
			h.connKeepAlive = true
		default:
			h.connOther = true
		}
	}
	return true
}

// parseLength parses a Content-Length value: digits only, at most 18.
func parseLength(v []byte) (int64, bool) {
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

// findKind returns the value of the first field of kind k, or nil.
func (h *rawHead) findKind(b []byte, k uint8) []byte {
	for i := 0; i < h.nfields; i++ {
		if h.kinds[i] == k {
			return h.fields[i].value.of(b)
		}
	}
	return nil
}

// chunkTracker follows a chunked body byte by byte to find where it ends;
// the bytes themselves are relayed unchanged.
type chunkTracker struct {
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
	csEndLF
	csDone
)

// feed consumes b and returns how many bytes belong to the body and
// whether the body ended there; ok is false on a malformed body.
func (t *chunkTracker) feed(b []byte) (n int, done, ok bool) {
	for n < len(b) {
		c := b[n]
		switch t.state {
		case csSize:
			switch {
			case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
				if t.digits == 15 {
					return n, false, false
				}
				t.digits++
				t.size = t.size<<4 | int64(hexVal(c))
			case t.digits == 0:
				return n, false, false
			case c == ';' || c == ' ' || c == '\t':
				t.state = csExt
			case c == '\r':
				t.state = csSizeLF
			default:
				return n, false, false
			}
		case csExt:
			if c == '\r' {
				t.state = csSizeLF
			} else if c < 0x20 && c != '\t' {
				return n, false, false
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, false
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
			n += int(k)
			t.size -= k
			if t.size == 0 {
				t.state = csDataCR
			}
			continue
		case csDataCR:
			if c != '\r' {
				return n, false, false
			}
			t.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, false, false
			}
			t.state = csSize
		case csTrailerStart:
			if c == '\r' {
				t.state = csEndLF
			} else {
				t.state = csTrailerLine
			}
		case csTrailerLine:
			if c == '\n' {
				t.state = csTrailerStart
			}
		case csEndLF:
			if c != '\n' {
				return n, false, false
			}
			t.state = csDone
			return n + 1, true, true
		}
		n++
	}
	return n, false, true
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

// eqFoldString compares b with s ignoring ASCII case (both sides).
func eqFoldString(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// cookieValue returns the value of cookie name in a Cookie header value
// ("a=1; b=2"), without surrounding double quotes, or nil. Name and value
// are read as fasthttp reads them (spaces around each trimmed).
func cookieValue(v []byte, name string) []byte {
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
