package h2srv

// headers.go: header blocks in (HEADERS, CONTINUATION), decoded and
// checked field by field into a stream's head or trailers.

import (
	"encoding/binary"
	"strconv"

	"golang.org/x/net/http2/hpack"
)

func (c *Conn) onHeaders(id uint32, flags byte, p []byte) {
	if id == 0 || id%2 == 0 {
		c.connError(ProtocolError, "HEADERS stream id")
		return
	}
	if flags&flagPadded != 0 {
		if len(p) == 0 || int(p[0]) >= len(p) {
			c.connError(ProtocolError, "HEADERS padding")
			return
		}
		p = p[1 : len(p)-int(p[0])]
	}
	h := &c.hdr
	*h = hdrBlock{active: true, id: id, end: flags&flagEndStream != 0}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			c.connError(FrameSizeError, "HEADERS priority")
			return
		}
		if binary.BigEndian.Uint32(p)&0x7fffffff == id {
			h.errCode = ProtocolError
		}
		p = p[5:]
	}
	s := c.streams[id]
	switch {
	case s != nil:
		// Trailers, or an error.
		switch {
		case s.state != stOpen:
			h.errCode = StreamClosed
		case !h.end:
			h.errCode = ProtocolError
		default:
			h.s, h.trailers = s, true
		}
	case id <= c.maxID:
		c.connError(StreamClosed, "HEADERS on a closed stream")
		return
	default:
		c.maxID = id
		switch {
		case c.goingAway:
			// After GOAWAY: decoded (the table must follow) and dropped.
		case h.errCode != 0:
		case c.active >= c.cfg.MaxConcurrentStreams:
			h.errCode = RefusedStream
		default:
			h.s, h.newStream = c.newStream(id), true
		}
	}
	c.fragment(p, flags&flagEndHeaders != 0)
}

func (c *Conn) onContinuation(id uint32, flags byte, p []byte) {
	h := &c.hdr
	if !h.active || id != h.id {
		c.connError(ProtocolError, "unexpected CONTINUATION")
		return
	}
	h.frames++
	if h.frames > maxContinuations {
		c.connError(EnhanceYourCalm, "CONTINUATION flood")
		return
	}
	c.fragment(p, flags&flagEndHeaders != 0)
}

func (c *Conn) fragment(p []byte, last bool) {
	h := &c.hdr
	h.bytes += len(p)
	if h.bytes > c.cfg.MaxHeaderListSize+maxHeaderBlockOverrun {
		c.connError(EnhanceYourCalm, "header block too large")
		return
	}
	if _, err := c.dec.Write(p); err != nil {
		c.connError(CompressionError, err.Error())
		return
	}
	if !last {
		return
	}
	if err := c.dec.Close(); err != nil {
		c.connError(CompressionError, err.Error())
		return
	}
	h.active = false
	c.endBlock()
}

func (c *Conn) endBlock() {
	h := &c.hdr
	s := h.s
	if h.errCode != 0 {
		if s != nil && h.newStream {
			c.closeStream(s, false) // not surfaced: freed
		}
		c.streamError(h.id, h.errCode)
		return
	}
	if s == nil {
		return
	}
	if h.trailers {
		if h.malformed || h.tooLarge {
			c.streamError(h.id, ProtocolError)
			return
		}
		if s.cl >= 0 && s.recvd != s.cl {
			c.streamError(h.id, ProtocolError)
			return
		}
		s.remoteEnd, s.state = true, stHalfClosedRemote
		c.event(EvData, s, 0)
		return
	}
	if h.tooLarge {
		s.remoteEnd = h.end
		c.hbuf = appendStatus(c.hbuf[:0], 431)
		c.writeBlock(s, c.hbuf, true)
		c.localEnd(s)
		return
	}
	connect := string(s.Method()) == "CONNECT"
	switch {
	case h.malformed, h.pseudo&1 == 0,
		connect && (h.pseudo&6 != 0 || s.authority.n == 0),
		!connect && h.pseudo&6 != 6,
		!connect && string(s.Path()) == "*" && string(s.Method()) != "OPTIONS",
		h.end && s.cl > 0:
		c.closeStream(s, false)
		c.writeRST(h.id, ProtocolError)
		return
	}
	if h.end {
		s.remoteEnd, s.state, s.headEnded = true, stHalfClosedRemote, true
	}
	s.held = true
	// Only a stream given to the consumer counts as opened for the
	// rapid-reset rule: streams refused, malformed or over the header
	// limit cost no work, and counting them would let a client buy
	// resets with them (three bad heads per reset kept the rule off).
	c.opened++
	c.meter.Stream(c.clock())
	c.events = append(c.events, Event{Kind: EvRequest, S: s})
}

// onField takes one decoded field (hpack's emit function).
func (c *Conn) onField(f hpack.HeaderField) {
	h := &c.hdr
	h.size += len(f.Name) + len(f.Value) + 32
	if h.size > c.cfg.MaxHeaderListSize {
		h.tooLarge = true
	}
	if h.s == nil || h.malformed || h.tooLarge {
		return
	}
	if !validName(f.Name) || !validValue(f.Value) {
		h.malformed = true
		return
	}
	s := h.s
	if f.Name[0] == ':' {
		if h.regular || h.trailers {
			h.malformed = true
			return
		}
		var sp *span
		var bit uint8
		switch f.Name {
		case ":method":
			sp, bit = &s.method, 1
		case ":path":
			sp, bit = &s.path, 2
		case ":scheme":
			sp, bit = &s.scheme, 4
		case ":authority":
			sp, bit = &s.authority, 8
		default:
			h.malformed = true
			return
		}
		if h.pseudo&bit != 0 || (f.Value == "" && bit != 8) {
			h.malformed = true // repeated, or empty (RFC 9113 §8.3.1)
			return
		}
		if bit == 1 && !validMethod(f.Value) || bit == 2 && !validPath(f.Value) {
			// The head goes on as an HTTP/1.1 request line: a method
			// that is not a token or a target with spaces or controls
			// would split it, and an absolute-form :path would carry a
			// second authority (fasthttp takes its host as the Host).
			h.malformed = true
			return
		}
		h.pseudo |= bit
		*sp = s.add(f.Value)
		return
	}
	h.regular = true
	if h.trailers {
		return // trailers are checked, not kept
	}
	switch f.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.malformed = true
		return
	case "te":
		if f.Value != "trailers" {
			h.malformed = true
			return
		}
	case "content-length":
		// 1*DIGIT (RFC 9110 §8.6): ParseInt alone takes "+0" and "-0".
		v, err := strconv.ParseInt(f.Value, 10, 64)
		if err != nil || v < 0 || f.Value[0] < '0' || f.Value[0] > '9' || (s.cl >= 0 && s.cl != v) {
			h.malformed = true
			return
		}
		s.cl = v
	}
	s.fields = append(s.fields, field{s.add(f.Name), s.add(f.Value)})
	if f.Name == "host" && h.pseudo&8 == 0 && s.authority.n == 0 {
		s.authority = s.fields[len(s.fields)-1].value // no :authority: Host stands in
	}
}

func (s *Stream) add(v string) span {
	sp := span{int32(len(s.arena)), int32(len(v))}
	s.arena = append(s.arena, v...)
	return sp
}

// validName: non-empty, lower case, token characters (a leading ':' for
// pseudo-fields).
func validName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case c == ':' && i == 0:
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c <= ' ' || c >= 0x7f || 'A' <= c && c <= 'Z':
			return false
		case c == '(' || c == ')' || c == ',' || c == '/' || c == ':' || c == ';' || c == '<' ||
			c == '=' || c == '>' || c == '?' || c == '@' || c == '[' || c == '\\' || c == ']' ||
			c == '{' || c == '}' || c == '"':
			return false
		}
	}
	return true
}

// validValue: no control character but HTAB (RFC 9113 §8.2.1 requires
// refusing NUL, CR and LF; the others are not field-vchars in RFC 9110
// §5.5 either, and the head is forwarded as HTTP/1.1: x/net refuses them
// too), and no SP or HTAB first or last (§8.2.1 again: an HTTP/1.1 parser
// would strip it, so the value the backend sees would not be the one
// checked here).
func validValue(v string) bool {
	if n := len(v); n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n-1] == ' ' || v[n-1] == '\t') {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validMethod: a token (RFC 9110 §9.1).
func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !tokenTable[m[i]] {
			return false
		}
	}
	return true
}

// validPath: origin-form ("/" first) or "*" (RFC 9113 §8.3.1), without
// spaces or controls.
func validPath(p string) bool {
	if p != "*" && p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// tokenTable: tchar (RFC 9110 §5.6.2).
var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
