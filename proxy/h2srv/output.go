package h2srv

// output.go: what the driver queues for the client (response heads,
// trailers, DATA under flow control, resets).

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
