package h2srv

import (
	"encoding/binary"
	"errors"
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

// ShedBuffers gives back the buffers the connection keeps between calls
// when nothing is in them: the partial frame's (empty between frames) and
// the output's (empty once taken). A driver calls it when the connection
// waits with no stream, so that an idle connection holds neither; the
// next bytes in or out allocate afresh.
func (c *Conn) ShedBuffers() {
	if len(c.in) == 0 {
		c.in = nil
	}
	if len(c.out) == 0 {
		c.out = nil
	}
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
