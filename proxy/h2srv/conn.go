package h2srv

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"golang.org/x/net/http2/hpack"
)

// Config is a connection's limits. Zero fields take the defaults below.
type Config struct {
	// MaxConcurrentStreams is how many streams the client may have open
	// (SETTINGS_MAX_CONCURRENT_STREAMS); a HEADERS above it is refused
	// with RST_STREAM(REFUSED_STREAM). Default 128, as nginx.
	MaxConcurrentStreams int
	// MaxHeaderListSize bounds a header block's decoded size (RFC 9113
	// §6.5.2: names, values and 32 bytes per field), and any one string
	// in it. A request over it is answered 431 here. Default 1 MiB.
	MaxHeaderListSize int
	// StreamWindow is each stream's receive window (the request body
	// bytes buffered here at most per stream), refilled as the consumer
	// reads. Default 256 KiB.
	StreamWindow int
	// ConnWindow is the connection's receive window: the body bytes
	// buffered on the whole connection at most. Default 1 MiB.
	ConnWindow int
	// ResetLimit: past this many RST_STREAM frames within about
	// ResetWindow, when they are also more than a quarter of the streams
	// whose request surfaced in that time, the connection is closed with
	// GOAWAY(ENHANCE_YOUR_CALM) (rapid reset, CVE-2023-44487; the rule is
	// ResetMeter's). Default 100. Negative: no limit.
	ResetLimit int
	// ResetWindow is the time constant with which resets and streams are
	// forgotten: a steady rate under ResetLimit per ResetWindow is never
	// cut. Default 10 s.
	ResetWindow time.Duration
	// Now is the clock of the reset rule, read at most once per Feed.
	// Default time.Now.
	Now func() time.Time
}

const (
	defaultMaxStreams     = 128
	defaultMaxHeaderList  = 1 << 20
	defaultStreamWindow   = 256 << 10
	defaultConnWindow     = 1 << 20
	defaultResetLimit     = 100
	defaultResetWindow    = 10 * time.Second
	maxContinuations      = 128      // CONTINUATION frames per header block
	maxHeaderBlockOverrun = 64 << 10 // encoded block bytes allowed past MaxHeaderListSize
	maxKeptArena          = 16 << 10 // a freed stream keeps buffers up to this
)

// EventKind says what happened to a stream (Event).
type EventKind uint8

const (
	// EvRequest: a request head is complete (Stream's accessors); from
	// now on the stream is held by the consumer until Release.
	EvRequest EventKind = iota + 1
	// EvData: body bytes arrived (ReadBody), or the body ended.
	EvData
	// EvReset: the stream was reset (by the client, by a stream error
	// found here, or by the connection's end); Code says why. Nothing
	// more is sent on it.
	EvReset
	// EvWritable: the stream's queued response data has all been sent.
	EvWritable
	// EvGoAway: the client sent GOAWAY (Code).
	EvGoAway
)

// Event is one thing the consumer must act on after Feed.
type Event struct {
	Kind EventKind
	S    *Stream // nil for EvGoAway
	Code ErrCode
}

// ConnError is the error Feed returns once the connection failed: a
// GOAWAY with Code is in the output, and the connection must be closed
// once it is written.
type ConnError struct {
	Code   ErrCode
	Reason string
}

func (e ConnError) Error() string { return "h2: connection error " + e.Code.String() + ": " + e.Reason }

// ErrBadPreface is Feed's error for a client whose first bytes are not
// the HTTP/2 preface.
var ErrBadPreface = errors.New("h2: bad client preface")

// Stream states (RFC 9113 §5.1). A stream in the map is open or
// half-closed (remote); one the server ended is closed at once (see
// localEnd), so half-closed (local) does not last.
const (
	stOpen uint8 = iota
	stHalfClosedRemote
	stClosed
)

type span struct{ off, n int32 }

type field struct{ name, value span }

// Stream is one request stream. Its head (Method, Path, ..., Fields) is
// immutable once EvRequest is out and may be read without the lock that
// serialises the Conn's methods; everything else goes through the Conn.
type Stream struct {
	id    uint32
	state uint8
	held  bool // surfaced by EvRequest and not yet Released
	// notified: an EvData / EvWritable is already queued
	notData, notWrite bool

	arena                           []byte
	fields                          []field
	method, path, authority, scheme span
	cl                              int64 // content-length; -1: none
	recvd                           int64 // body bytes received
	body                            []byte
	bodyOff                         int
	recvWin                         int64 // what the client may still send
	unacked                         int   // read, not yet given back by WINDOW_UPDATE
	remoteEnd, localEnd             bool
	sendWin                         int64
	pend, trailers                  []byte
	pendEnd, blocked                bool
	resetCode                       ErrCode
	wasReset, headEnded             bool
	// User is the consumer's (the driver's per-stream state).
	User any
}

func (s *Stream) str(sp span) []byte { return s.arena[sp.off : sp.off+sp.n] }

// ID is the stream identifier.
func (s *Stream) ID() uint32 { return s.id }

// Method is :method.
func (s *Stream) Method() []byte { return s.str(s.method) }

// Path is :path (empty for CONNECT).
func (s *Stream) Path() []byte { return s.str(s.path) }

// Authority is :authority, or the host field when it is absent (RFC
// 9113 §8.3.1).
func (s *Stream) Authority() []byte { return s.str(s.authority) }

// Scheme is :scheme.
func (s *Stream) Scheme() []byte { return s.str(s.scheme) }

// ContentLength is the content-length field's value, -1 without one.
func (s *Stream) ContentLength() int64 { return s.cl }

// NumFields is the number of regular fields of the head.
func (s *Stream) NumFields() int { return len(s.fields) }

// Field returns the i-th regular field (lower-case name).
func (s *Stream) Field(i int) (name, value []byte) {
	f := s.fields[i]
	return s.str(f.name), s.str(f.value)
}

// Arena is the buffer the head is decoded into: HeadSpans and FieldSpans
// are [start, end) offsets into it. Like the head, it is immutable once
// EvRequest is out and valid until Release; a driver may read the head
// as spans over it rather than field by field.
func (s *Stream) Arena() []byte { return s.arena }

// HeadSpans are :method, :path and the authority (Authority) as offsets
// into Arena.
func (s *Stream) HeadSpans() (method, path, authority [2]int32) {
	return s.method.ends(), s.path.ends(), s.authority.ends()
}

// FieldSpans are the i-th regular field's name and value as offsets into
// Arena.
func (s *Stream) FieldSpans(i int) (name, value [2]int32) {
	f := s.fields[i]
	return f.name.ends(), f.value.ends()
}

func (sp span) ends() [2]int32 { return [2]int32{sp.off, sp.off + sp.n} }

// EndedByHead reports whether the HEADERS ended the stream: no body.
// Valid from EvRequest on (a body's end later does not change it).
func (s *Stream) EndedByHead() bool { return s.headEnded }

// hdrBlock is the header block being decoded.
type hdrBlock struct {
	active    bool
	id        uint32
	s         *Stream // request head or trailers target; nil: decoded and dropped
	trailers  bool
	end       bool    // END_STREAM on the HEADERS
	errCode   ErrCode // a stream error to send once the block is decoded
	frames    int
	bytes     int
	size      int
	tooLarge  bool
	malformed bool
	regular   bool // a regular field was seen (pseudo-fields must come first)
	newStream bool
	pseudo    uint8 // pseudo-fields seen (bit per name)
}

// Conn is the server side of one HTTP/2 connection, without I/O: Feed
// gives it what was read, TakeEvents what came of it, and the Write
// methods queue frames in the output (Output, TakeOutput) for the driver
// to write. It is not safe for concurrent use: the driver serialises
// every call (one mutex per connection).
type Conn struct {
	cfg Config

	out     []byte
	in      []byte // a partial frame carried to the next Feed
	preface int    // preface bytes seen
	settled bool   // the client's first SETTINGS came
	dead    bool
	err     error

	goingAway bool
	goAwayID  uint32 // the first GOAWAY's last-stream-id
	dec       *hpack.Decoder
	// The encoder's dynamic table size as the client knows it (4096 at
	// first, RFC 7541 §4.2): lowered with the client's
	// SETTINGS_HEADER_TABLE_SIZE, never raised (no entry is ever added,
	// hpackenc.go). tableUpdate: the next header block written starts
	// with a Dynamic Table Size Update to it.
	encTable    uint32
	tableUpdate bool
	hdr         hdrBlock
	// fieldSize is the size of the field being emitted, for tooLarge.

	streams map[uint32]*Stream
	maxID   uint32
	active  int
	free    []*Stream

	sendWin      int64 // connection send window
	peerInitWin  int64
	peerMaxFrame int
	recvWin      int64 // connection receive window left
	connUnacked  int
	blocked      []*Stream

	events []Event

	// The rapid-reset rule (ResetMeter), and its lifetime counts (Streams,
	// Resets). now is the clock's reading for the Feed in progress.
	meter          ResetMeter
	opened, resets int64
	flooded        bool
	now            time.Time
	nowSet         bool
	peerGoAway     bool

	hbuf, scratch, block []byte
}

// NewConn returns a connection whose SETTINGS (and the connection
// window's first WINDOW_UPDATE) are already in the output: a server may
// send them before the client's preface arrives.
func NewConn(cfg Config) *Conn {
	if cfg.MaxConcurrentStreams <= 0 {
		cfg.MaxConcurrentStreams = defaultMaxStreams
	}
	if cfg.MaxHeaderListSize <= 0 {
		cfg.MaxHeaderListSize = defaultMaxHeaderList
	}
	if cfg.StreamWindow <= 0 {
		cfg.StreamWindow = defaultStreamWindow
	}
	cfg.StreamWindow = min(cfg.StreamWindow, maxWindow)
	if cfg.ConnWindow <= 0 {
		cfg.ConnWindow = defaultConnWindow
	}
	cfg.ConnWindow = max(min(cfg.ConnWindow, maxWindow), defaultWindow)
	if cfg.ResetLimit == 0 {
		cfg.ResetLimit = defaultResetLimit
	}
	if cfg.ResetWindow <= 0 {
		cfg.ResetWindow = defaultResetWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Conn{
		cfg:          cfg,
		streams:      make(map[uint32]*Stream),
		sendWin:      defaultWindow,
		peerInitWin:  defaultWindow,
		peerMaxFrame: defaultFrameSize,
		recvWin:      int64(cfg.ConnWindow),
		encTable:     defaultTableSize,
		meter:        ResetMeter{Limit: cfg.ResetLimit, Window: cfg.ResetWindow},
	}
	c.dec = hpack.NewDecoder(4096, c.onField)
	c.dec.SetMaxStringLength(cfg.MaxHeaderListSize)
	c.out = appendFrameHeader(c.out, 3*6, frameSettings, 0, 0)
	c.out = appendSetting(c.out, settingMaxConcurrentStreams, uint32(cfg.MaxConcurrentStreams))
	c.out = appendSetting(c.out, settingInitialWindowSize, uint32(cfg.StreamWindow))
	c.out = appendSetting(c.out, settingMaxHeaderListSize, uint32(cfg.MaxHeaderListSize))
	if inc := cfg.ConnWindow - defaultWindow; inc > 0 {
		c.out = appendFrameHeader(c.out, 4, frameWindowUpdate, 0, 0)
		c.out = appendU32(c.out, uint32(inc))
	}
	return c
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, id)
	return binary.BigEndian.AppendUint32(b, v)
}

// Output is what waits to be written.
func (c *Conn) Output() []byte { return c.out }

// TakeOutput returns the output and continues with spare (emptied) as
// the buffer, so that the driver writes one while frames go in the other.
func (c *Conn) TakeOutput(spare []byte) []byte {
	b := c.out
	c.out = spare[:0]
	return b
}

// TakeEvents appends the events since the last call to dst.
func (c *Conn) TakeEvents(dst []Event) []Event {
	for _, e := range c.events {
		if e.S != nil {
			e.S.notData, e.S.notWrite = false, false
		}
	}
	dst = append(dst, c.events...)
	clear(c.events)
	c.events = c.events[:0]
	return dst
}

// HeadPending reports whether a header block is in progress (a HEADERS
// without END_HEADERS came, its last CONTINUATION not yet), and on which
// stream: the driver bounds how long it may take.
func (c *Conn) HeadPending() (id uint32, ok bool) { return c.hdr.id, c.hdr.active && !c.dead }

// Err is the connection's error (nil while it is usable).
func (c *Conn) Err() error { return c.err }

// Active is the number of open streams.
func (c *Conn) Active() int { return c.active }

// GoingAway reports whether GOAWAY was sent (graceful or not).
func (c *Conn) GoingAway() bool { return c.goingAway }

// PeerGoAway reports whether the client sent GOAWAY.
func (c *Conn) PeerGoAway() bool { return c.peerGoAway }

// Streams and Resets are what the rapid-reset rule counts, over the
// connection's life: streams whose request the consumer was given
// (EvRequest), and RST_STREAM frames the client sent or stream errors it
// provoked on its streams. The rule itself counts them as a rate
// (ResetMeter).
func (c *Conn) Streams() int64 { return c.opened }
func (c *Conn) Resets() int64  { return c.resets }

// Suspect reports whether more than one recent stream in eight was reset
// (ResetMeter): the driver then waits a moment before dispatching a new
// stream, so that a reset sent right behind its HEADERS is seen first.
func (c *Conn) Suspect() bool { return c.meter.Suspect() }

// clock is the time for the reset rule, read once per Feed.
func (c *Conn) clock() time.Time {
	if !c.nowSet {
		c.now, c.nowSet = c.cfg.Now(), true
	}
	return c.now
}

// Flooded reports whether the connection ended for resetting too many
// streams (GOAWAY ENHANCE_YOUR_CALM).
func (c *Conn) Flooded() bool { return c.flooded }

// ---------------------------------------------------------------- input

// Feed processes b, all of it (a partial frame is kept for the next
// call). It returns the connection's error once there is one: the GOAWAY
// is in the output and nothing more is read.
func (c *Conn) Feed(b []byte) error {
	if c.dead {
		return c.err
	}
	c.nowSet = false
	if c.preface < len(Preface) {
		k := min(len(Preface)-c.preface, len(b))
		if string(b[:k]) != Preface[c.preface:c.preface+k] {
			c.connError(ProtocolError, "bad preface")
			c.err = ErrBadPreface
			return c.err
		}
		c.preface += k
		b = b[k:]
	}
	for len(c.in) > 0 && len(b) > 0 && !c.dead {
		if len(c.in) < frameHeaderLen {
			k := min(frameHeaderLen-len(c.in), len(b))
			c.in = append(c.in, b[:k]...)
			b = b[k:]
			if len(c.in) < frameHeaderLen {
				break
			}
			if !c.checkLen(c.in) {
				break
			}
		}
		need := frameHeaderLen + frameLen(c.in) - len(c.in)
		k := min(need, len(b))
		c.in = append(c.in, b[:k]...)
		b = b[k:]
		if k == need {
			c.frame(c.in[:frameHeaderLen], c.in[frameHeaderLen:])
			c.in = c.in[:0]
		}
	}
	for !c.dead && len(b) >= frameHeaderLen {
		if !c.checkLen(b) {
			break
		}
		n := frameHeaderLen + frameLen(b)
		if len(b) < n {
			break
		}
		c.frame(b[:frameHeaderLen], b[frameHeaderLen:n])
		b = b[n:]
	}
	if !c.dead && len(b) > 0 {
		c.in = append(c.in[:0], b...)
	}
	if c.dead {
		return c.err
	}
	return nil
}

func frameLen(h []byte) int { return int(h[0])<<16 | int(h[1])<<8 | int(h[2]) }

// checkLen refuses a frame larger than SETTINGS_MAX_FRAME_SIZE (ours is
// the default, 16384).
func (c *Conn) checkLen(h []byte) bool {
	if frameLen(h) > defaultFrameSize {
		c.connError(FrameSizeError, "frame too large")
		return false
	}
	return true
}

func (c *Conn) frame(h, p []byte) {
	typ, flags := h[3], h[4]
	id := binary.BigEndian.Uint32(h[5:9]) & 0x7fffffff
	if !c.settled {
		if typ != frameSettings || flags&flagAck != 0 {
			c.connError(ProtocolError, "first frame not SETTINGS")
			return
		}
		c.settled = true
	}
	if c.hdr.active && typ != frameContinuation {
		c.connError(ProtocolError, "header block interrupted")
		return
	}
	switch typ {
	case frameData:
		c.onData(id, flags, p)
	case frameHeaders:
		c.onHeaders(id, flags, p)
	case framePriority:
		c.onPriority(id, p)
	case frameRSTStream:
		c.onRST(id, p)
	case frameSettings:
		c.onSettings(id, flags, p)
	case framePushPromise:
		c.connError(ProtocolError, "PUSH_PROMISE from a client")
	case framePing:
		c.onPing(id, flags, p)
	case frameGoAway:
		c.onGoAway(id, p)
	case frameWindowUpdate:
		c.onWindowUpdate(id, p)
	case frameContinuation:
		c.onContinuation(id, flags, p)
	}
	// Unknown types are ignored (RFC 9113 §5.5).
}

// connError sends GOAWAY with code and ends the connection: every held
// stream is told (EvReset).
func (c *Conn) connError(code ErrCode, reason string) {
	if c.dead {
		return
	}
	c.dead = true
	c.err = ConnError{code, reason}
	c.writeGoAway(code)
	c.resetAll(code)
}

// Close ends every stream (the connection is gone): held streams get
// EvReset with Cancel. Nothing is written.
func (c *Conn) Close() {
	if !c.dead {
		c.dead = true
		c.err = ConnError{Cancel, "closed"}
	}
	c.resetAll(Cancel)
}

func (c *Conn) resetAll(code ErrCode) {
	for _, s := range c.streams {
		s.wasReset, s.resetCode = true, code
		c.closeStream(s, true)
	}
	c.blocked = c.blocked[:0]
}

// writeGoAway writes GOAWAY with the last stream the client opened, or,
// after an earlier GOAWAY, that one's: streams opened since were dropped
// (onHeaders), and a later GOAWAY must not announce more (RFC 9113 §6.8).
func (c *Conn) writeGoAway(code ErrCode) {
	if !c.goingAway {
		c.goAwayID = c.maxID
	}
	c.out = appendFrameHeader(c.out, 8, frameGoAway, 0, 0)
	c.out = appendU32(c.out, c.goAwayID)
	c.out = appendU32(c.out, uint32(code))
	c.goingAway = true
}

// GoAway starts a graceful close: GOAWAY(NO_ERROR) with the last stream
// the client opened; streams it opens after that are ignored. The driver
// closes the connection once Active is 0.
func (c *Conn) GoAway() {
	if c.goingAway || c.dead {
		return
	}
	c.writeGoAway(NoError)
}

// streamError resets stream id with code (RFC 9113 §5.4.2). A stream
// still in the map had its head surfaced or refused and may be at work:
// the reset counts as the client's own RST_STREAM would (countReset), or
// a client could reset streams by provoking errors (a WINDOW_UPDATE of 0,
// DATA after END_STREAM: "MadeYouReset", CVE-2025-8671) past the
// rapid-reset rule.
func (c *Conn) streamError(id uint32, code ErrCode) {
	c.writeRST(id, code)
	if s := c.streams[id]; s != nil {
		s.wasReset, s.resetCode = true, code
		c.closeStream(s, true)
		c.countReset()
	}
}

// countReset counts one stream reset by the client, or provoked by it,
// and applies the rapid-reset rule (ResetMeter): past ResetLimit recent
// resets that are also more than a quarter of the recent streams whose
// request surfaced, GOAWAY(ENHANCE_YOUR_CALM). It reports whether the
// connection ended so.
func (c *Conn) countReset() bool {
	c.resets++
	if c.meter.Reset(c.clock()) {
		c.flooded = true
		c.connError(EnhanceYourCalm, "rapid reset")
		return true
	}
	return false
}

func (c *Conn) writeRST(id uint32, code ErrCode) {
	c.out = appendFrameHeader(c.out, 4, frameRSTStream, 0, id)
	c.out = appendU32(c.out, uint32(code))
}

func (c *Conn) event(kind EventKind, s *Stream, code ErrCode) {
	switch kind {
	case EvData:
		if s.notData {
			return
		}
		s.notData = true
	case EvWritable:
		if s.notWrite {
			return
		}
		s.notWrite = true
	}
	c.events = append(c.events, Event{Kind: kind, S: s, Code: code})
}

// closeStream removes s; reset tells a held stream's consumer (EvReset).
func (c *Conn) closeStream(s *Stream, reset bool) {
	if s.state == stClosed {
		return
	}
	s.state = stClosed
	delete(c.streams, s.id)
	c.active--
	// Body bytes nobody will read go back to the connection window.
	c.giveBack(nil, len(s.body)-s.bodyOff)
	s.body, s.bodyOff = s.body[:0], 0
	s.pend, s.trailers, s.blocked = s.pend[:0], s.trailers[:0], false
	if s.held {
		if reset {
			c.event(EvReset, s, s.resetCode)
		}
		return
	}
	c.freeStream(s)
}

func (c *Conn) newStream(id uint32) *Stream {
	var s *Stream
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		s = new(Stream)
	}
	s.id, s.state = id, stOpen
	s.cl = -1
	s.recvWin = int64(c.cfg.StreamWindow)
	s.sendWin = c.peerInitWin
	c.streams[id] = s
	c.active++
	return s
}

func (c *Conn) freeStream(s *Stream) {
	keep := *s
	*s = Stream{}
	if cap(keep.arena) <= maxKeptArena {
		s.arena = keep.arena[:0]
	}
	if cap(keep.fields) <= 256 {
		s.fields = keep.fields[:0]
	}
	if cap(keep.body) <= maxKeptArena {
		s.body = keep.body[:0]
	}
	if cap(keep.pend) <= maxKeptArena {
		s.pend = keep.pend[:0]
	}
	if len(c.free) < 64 {
		c.free = append(c.free, s)
	}
}

// Release ends the consumer's hold on s (taken with EvRequest). A stream
// still open is reset with CANCEL (the consumer gave up on it).
func (c *Conn) Release(s *Stream) {
	if !s.held {
		return
	}
	s.held = false
	s.User = nil
	if s.state != stClosed && s.pendEnd {
		return // its end waits for window; freed once sent (closeStream)
	}
	if s.state != stClosed {
		if !c.dead {
			c.writeRST(s.id, Cancel)
		}
		s.wasReset, s.resetCode = true, Cancel
		c.closeStream(s, false)
		return
	}
	c.freeStream(s)
}

// ---------------------------------------------------------------- frames

func (c *Conn) onSettings(id uint32, flags byte, p []byte) {
	if id != 0 {
		c.connError(ProtocolError, "SETTINGS on a stream")
		return
	}
	if flags&flagAck != 0 {
		if len(p) != 0 {
			c.connError(FrameSizeError, "SETTINGS ack with a payload")
		}
		return
	}
	if len(p)%6 != 0 {
		c.connError(FrameSizeError, "SETTINGS length")
		return
	}
	for ; len(p) > 0; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:6])
		switch binary.BigEndian.Uint16(p[:2]) {
		case settingEnablePush:
			if v > 1 {
				c.connError(ProtocolError, "ENABLE_PUSH")
				return
			}
		case settingInitialWindowSize:
			if v > maxWindow {
				c.connError(FlowControlError, "INITIAL_WINDOW_SIZE")
				return
			}
			delta := int64(v) - c.peerInitWin
			c.peerInitWin = int64(v)
			for _, s := range c.streams {
				s.sendWin += delta
				if s.sendWin > maxWindow {
					c.connError(FlowControlError, "INITIAL_WINDOW_SIZE overflows a window")
					return
				}
			}
		case settingHeaderTableSize:
			// The encoder keeps no entries (hpackenc.go), so its table
			// follows the setting down only: one update, to the
			// smallest size set since the last block, which is also
			// the final one (RFC 7541 §4.2).
			if v < c.encTable {
				c.encTable, c.tableUpdate = v, true
			}
		case settingMaxFrameSize:
			if v < defaultFrameSize || v > maxFrameSizeMax {
				c.connError(ProtocolError, "MAX_FRAME_SIZE")
				return
			}
			c.peerMaxFrame = int(v)
		}
		// MAX_CONCURRENT_STREAMS: the server pushes nothing.
		// MAX_HEADER_LIST_SIZE: advisory. Others: ignored.
	}
	c.out = appendFrameHeader(c.out, 0, frameSettings, flagAck, 0)
	c.drainBlocked()
}

func (c *Conn) onPing(id uint32, flags byte, p []byte) {
	if id != 0 {
		c.connError(ProtocolError, "PING on a stream")
		return
	}
	if len(p) != 8 {
		c.connError(FrameSizeError, "PING length")
		return
	}
	if flags&flagAck != 0 {
		return
	}
	c.out = appendFrameHeader(c.out, 8, framePing, flagAck, 0)
	c.out = append(c.out, p...)
}

func (c *Conn) onGoAway(id uint32, p []byte) {
	if id != 0 {
		c.connError(ProtocolError, "GOAWAY on a stream")
		return
	}
	if len(p) < 8 {
		c.connError(FrameSizeError, "GOAWAY length")
		return
	}
	c.peerGoAway = true
	c.events = append(c.events, Event{Kind: EvGoAway, Code: ErrCode(binary.BigEndian.Uint32(p[4:8]))})
}

func (c *Conn) onPriority(id uint32, p []byte) {
	if id == 0 {
		c.connError(ProtocolError, "PRIORITY on stream 0")
		return
	}
	if len(p) != 5 {
		c.streamError(id, FrameSizeError)
		return
	}
	if binary.BigEndian.Uint32(p)&0x7fffffff == id {
		c.streamError(id, ProtocolError)
	}
	// Otherwise ignored: responses go out as they are ready.
}

func (c *Conn) onRST(id uint32, p []byte) {
	if len(p) != 4 {
		c.connError(FrameSizeError, "RST_STREAM length")
		return
	}
	if id == 0 || id > c.maxID {
		c.connError(ProtocolError, "RST_STREAM on an idle stream")
		return
	}
	if c.countReset() {
		return
	}
	if s := c.streams[id]; s != nil {
		s.wasReset, s.resetCode = true, ErrCode(binary.BigEndian.Uint32(p))
		c.closeStream(s, true)
	}
}

func (c *Conn) onWindowUpdate(id uint32, p []byte) {
	if len(p) != 4 {
		c.connError(FrameSizeError, "WINDOW_UPDATE length")
		return
	}
	inc := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
	if id == 0 {
		if inc == 0 {
			c.connError(ProtocolError, "WINDOW_UPDATE of 0")
			return
		}
		c.sendWin += inc
		if c.sendWin > maxWindow {
			c.connError(FlowControlError, "connection window overflow")
			return
		}
		c.drainBlocked()
		return
	}
	s := c.streams[id]
	if s == nil {
		if id > c.maxID {
			c.connError(ProtocolError, "WINDOW_UPDATE on an idle stream")
		}
		return
	}
	if inc == 0 {
		c.streamError(id, ProtocolError)
		return
	}
	s.sendWin += inc
	if s.sendWin > maxWindow {
		c.streamError(id, FlowControlError)
		return
	}
	if s.blocked {
		c.drainBlocked()
	}
}

func (c *Conn) onData(id uint32, flags byte, p []byte) {
	if id == 0 {
		c.connError(ProtocolError, "DATA on stream 0")
		return
	}
	n := len(p)
	if int64(n) > c.recvWin {
		c.connError(FlowControlError, "connection window exceeded")
		return
	}
	c.recvWin -= int64(n)
	if flags&flagPadded != 0 {
		if n == 0 || int(p[0]) >= n {
			c.connError(ProtocolError, "DATA padding")
			return
		}
		p = p[1 : n-int(p[0])]
	}
	s := c.streams[id]
	if s == nil {
		if id > c.maxID {
			c.connError(ProtocolError, "DATA on an idle stream")
			return
		}
		c.giveBack(nil, n)
		c.writeRST(id, StreamClosed)
		return
	}
	if s.state != stOpen {
		c.giveBack(nil, n)
		c.streamError(id, StreamClosed)
		return
	}
	if int64(n) > s.recvWin {
		c.giveBack(nil, n)
		c.streamError(id, FlowControlError)
		return
	}
	s.recvWin -= int64(n)
	if pad := n - len(p); pad > 0 {
		c.giveBack(s, pad)
	}
	s.recvd += int64(len(p))
	end := flags&flagEndStream != 0
	if s.cl >= 0 && (s.recvd > s.cl || end && s.recvd != s.cl) {
		c.giveBack(nil, len(p))
		c.streamError(id, ProtocolError)
		return
	}
	s.body = append(s.body, p...)
	if end {
		s.remoteEnd, s.state = true, stHalfClosedRemote
	}
	if (len(p) > 0 || end) && s.held {
		c.event(EvData, s, 0)
	}
}

// giveBack returns n received bytes to the receive windows (the stream's
// too, when s is given and open), sending WINDOW_UPDATE once half a
// window is owed.
func (c *Conn) giveBack(s *Stream, n int) {
	if n <= 0 || c.dead {
		return
	}
	c.connUnacked += n
	if c.connUnacked >= c.cfg.ConnWindow/2 {
		c.out = appendFrameHeader(c.out, 4, frameWindowUpdate, 0, 0)
		c.out = appendU32(c.out, uint32(c.connUnacked))
		c.recvWin += int64(c.connUnacked)
		c.connUnacked = 0
	}
	if s == nil || s.state != stOpen {
		return
	}
	s.unacked += n
	if s.unacked >= c.cfg.StreamWindow/2 {
		c.out = appendFrameHeader(c.out, 4, frameWindowUpdate, 0, s.id)
		c.out = appendU32(c.out, uint32(s.unacked))
		s.recvWin += int64(s.unacked)
		s.unacked = 0
	}
}

// ReadBody copies body bytes of s into p, giving them back to the
// windows. end is true once the body is all read (the client ended the
// stream).
func (c *Conn) ReadBody(s *Stream, p []byte) (n int, end bool) {
	n = copy(p, s.body[s.bodyOff:])
	s.bodyOff += n
	if s.bodyOff == len(s.body) {
		s.body, s.bodyOff = s.body[:0], 0
	}
	c.giveBack(s, n)
	return n, s.remoteEnd && len(s.body) == 0
}

// BodyState reports what ReadBody would find: bytes buffered, whether
// the body ended, and whether the stream was reset (and why).
func (c *Conn) BodyState(s *Stream) (buffered int, end, reset bool, code ErrCode) {
	return len(s.body) - s.bodyOff, s.remoteEnd, s.wasReset, s.resetCode
}

// ---------------------------------------------------------------- headers

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

// ---------------------------------------------------------------- output

// Headers starts a response head for s with status; Field adds to it and
// EndHeaders queues it. Between Headers and EndHeaders no other call may
// come (the block is built in the Conn's scratch).
func (c *Conn) Headers(status int) { c.hbuf = appendStatus(c.hbuf[:0], status) }

// Trailers starts a trailer block (Field, then EndTrailers).
func (c *Conn) Trailers() { c.hbuf = c.hbuf[:0] }

// Field adds one field to the block in progress; its name is lower-cased.
func (c *Conn) Field(name, value []byte) {
	c.hbuf, c.scratch = appendField(c.hbuf, c.scratch, name, value)
}

// EndHeaders queues the head built since Headers for s; end ends the
// stream with it (no body). It reports false if s is closed (reset): the
// response is dropped.
func (c *Conn) EndHeaders(s *Stream, end bool) bool {
	if s.state == stClosed || s.localEnd || c.dead {
		return false
	}
	c.writeBlock(s, c.hbuf, end)
	if end {
		c.localEnd(s)
	}
	return true
}

// EndTrailers queues the trailers built since Trailers and ends the
// stream; if data waits for window, they follow it.
func (c *Conn) EndTrailers(s *Stream) bool {
	if s.state == stClosed || s.localEnd || s.pendEnd || c.dead {
		return false
	}
	if len(s.pend) > 0 {
		s.trailers = append(s.trailers[:0], c.hbuf...)
		s.pendEnd = true
		return true
	}
	c.writeBlock(s, c.hbuf, true)
	c.localEnd(s)
	return true
}

// writeBlock frames a header block: HEADERS, then CONTINUATION frames as
// the client's MAX_FRAME_SIZE requires. The first block written after the
// client lowered SETTINGS_HEADER_TABLE_SIZE starts with the table size
// update it is owed: it is added here, where blocks take their place in
// the output (after the SETTINGS acknowledgement), not where they are
// built (trailers wait behind their data).
func (c *Conn) writeBlock(s *Stream, b []byte, end bool) {
	if c.tableUpdate {
		c.tableUpdate = false
		c.block = appendTableSize(c.block[:0], c.encTable)
		c.block = append(c.block, b...)
		b = c.block
	}
	typ := byte(frameHeaders)
	var flags byte
	if end {
		flags = flagEndStream
	}
	for {
		n := min(len(b), c.peerMaxFrame)
		f := flags
		if n == len(b) {
			f |= flagEndHeaders
		}
		c.out = appendFrameHeader(c.out, n, typ, f, s.id)
		c.out = append(c.out, b[:n]...)
		b = b[n:]
		if len(b) == 0 {
			return
		}
		typ, flags = frameContinuation, 0
	}
}

// WriteData queues b on s, ending the stream after it if end. What the
// flow-control windows allow goes into the output at once; the rest waits
// in the stream (Pending) until WINDOW_UPDATEs come, and EvWritable tells
// when it is all out. It reports false if s is closed (reset).
func (c *Conn) WriteData(s *Stream, b []byte, end bool) bool {
	if s.state == stClosed || s.localEnd || s.pendEnd || c.dead {
		return false
	}
	if len(s.pend) > 0 {
		s.pend = append(s.pend, b...)
		s.pendEnd = end
		return true
	}
	b = c.sendData(s, b, end)
	if len(b) > 0 {
		s.pend = append(s.pend, b...)
		s.pendEnd = end
		if !s.blocked {
			s.blocked = true
			c.blocked = append(c.blocked, s)
		}
	}
	return true
}

// Pending is how many bytes of s wait for flow-control window.
func (c *Conn) Pending(s *Stream) int { return len(s.pend) }

// Closed reports whether s is closed: ended both ways, or reset.
func (c *Conn) Closed(s *Stream) bool { return s.state == stClosed }

// sendData frames what the windows allow of b and returns the rest.
func (c *Conn) sendData(s *Stream, b []byte, end bool) []byte {
	for {
		n := int(min(int64(len(b)), int64(c.peerMaxFrame), s.sendWin, c.sendWin))
		if n < 0 {
			n = 0
		}
		if n == 0 && len(b) > 0 {
			return b
		}
		var flags byte
		last := n == len(b)
		if last && end {
			flags = flagEndStream
		}
		c.out = appendFrameHeader(c.out, n, frameData, flags, s.id)
		c.out = append(c.out, b[:n]...)
		s.sendWin -= int64(n)
		c.sendWin -= int64(n)
		b = b[n:]
		if last {
			if end {
				c.localEnd(s)
			}
			return nil
		}
	}
}

// drainBlocked sends what the windows now allow of the streams waiting.
func (c *Conn) drainBlocked() {
	if len(c.blocked) == 0 {
		return
	}
	kept := c.blocked[:0]
	for _, s := range c.blocked {
		if !s.blocked || s.state == stClosed {
			s.blocked = false
			continue
		}
		if c.sendWin <= 0 {
			kept = append(kept, s)
			continue
		}
		rest := c.sendData(s, s.pend, s.pendEnd && len(s.trailers) == 0)
		if len(rest) > 0 {
			s.pend = append(s.pend[:0], rest...)
			kept = append(kept, s)
			continue
		}
		s.pend = s.pend[:0]
		s.blocked = false
		if s.pendEnd && len(s.trailers) > 0 {
			c.writeBlock(s, s.trailers, true)
			s.trailers = s.trailers[:0]
			c.localEnd(s)
		}
		if s.held {
			c.event(EvWritable, s, 0)
		}
	}
	clear(c.blocked[len(kept):])
	c.blocked = kept
}

// localEnd: the server ended s. If the client has not ended its side,
// the stream is reset with NO_ERROR: the rest of its body is not wanted
// (RFC 9113 §8.1).
func (c *Conn) localEnd(s *Stream) {
	s.localEnd = true
	if !s.remoteEnd {
		c.writeRST(s.id, NoError)
	}
	c.closeStream(s, false)
}

// ResetStream resets s with code (the server gives up on it: a response
// cut short, a write that timed out). Nothing more is sent on it.
func (c *Conn) ResetStream(s *Stream, code ErrCode) {
	if s.state == stClosed || c.dead {
		return
	}
	c.writeRST(s.id, code)
	s.wasReset, s.resetCode = true, code
	c.closeStream(s, false)
}
