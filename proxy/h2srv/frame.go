package h2srv

import "encoding/binary"

// Frame types (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// Settings identifiers (RFC 9113 §6.5.2).
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
)

// ErrCode is an HTTP/2 error code (RFC 9113 §7).
type ErrCode uint32

const (
	NoError            ErrCode = 0x0
	ProtocolError      ErrCode = 0x1
	InternalError      ErrCode = 0x2
	FlowControlError   ErrCode = 0x3
	SettingsTimeout    ErrCode = 0x4
	StreamClosed       ErrCode = 0x5
	FrameSizeError     ErrCode = 0x6
	RefusedStream      ErrCode = 0x7
	Cancel             ErrCode = 0x8
	CompressionError   ErrCode = 0x9
	ConnectError       ErrCode = 0xa
	EnhanceYourCalm    ErrCode = 0xb
	InadequateSecurity ErrCode = 0xc
	HTTP11Required     ErrCode = 0xd
)

var errNames = [...]string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
	"SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
	"COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}

func (e ErrCode) String() string {
	if int(e) < len(errNames) {
		return errNames[e]
	}
	return "unknown error code"
}

// Preface is what a client sends first (RFC 9113 §3.4).
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

const (
	frameHeaderLen   = 9
	defaultFrameSize = 16384
	maxFrameSizeMax  = 1<<24 - 1
	maxWindow        = 1<<31 - 1
	defaultWindow    = 65535
	defaultTableSize = 4096 // SETTINGS_HEADER_TABLE_SIZE's initial value
)

// appendFrameHeader appends a frame header.
func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24)&0x7f, byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendU32(b []byte, v uint32) []byte {
	return binary.BigEndian.AppendUint32(b, v)
}
