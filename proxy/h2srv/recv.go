package h2srv

// recv.go: the frames a client sends, other than header blocks
// (SETTINGS, PING, GOAWAY, PRIORITY, RST_STREAM, WINDOW_UPDATE, DATA),
// and the request body they carry.

import (
	"encoding/binary"
)

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
