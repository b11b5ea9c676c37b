package h2srv

// stream.go: a request stream as the driver sees it -- its head over
// the stream's arena -- and the stream states.

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
