// Package h2srv is the server side of an HTTP/2 connection (RFC 9113)
// without I/O: it is fed the bytes read from the connection, says what
// came of them as events, and takes the response's frames into an output
// buffer that its driver writes. It starts no goroutine and takes no lock,
// so one driver runs it from a goroutine per connection (proxy/h2own.go,
// serialising every call with the connection's mutex) and another from an
// event loop (proxy/evloop/h2_linux.go, through the same mutex: the
// loop's streams and the workers' share one connection).
//
// # Use
//
//	c := h2srv.NewConn(h2srv.Config{MaxConcurrentStreams: 128})
//	// write c.TakeOutput(spare) to the socket whenever c.Output() is not empty
//	err := c.Feed(bytesRead)        // a ConnError: write the output (GOAWAY), close
//	for _, e := range c.TakeEvents(evs[:0]) {
//		switch e.Kind {
//		case h2srv.EvRequest:  // e.S.Method(), Path(), Authority(), Field(i) ...
//		case h2srv.EvData:     // c.ReadBody(e.S, p): body bytes, the windows refilled
//		case h2srv.EvReset:    // stop working on e.S
//		case h2srv.EvWritable: // e.S's queued response is all out
//		}
//	}
//	c.Headers(200); c.Field(name, value); c.EndHeaders(s, false)
//	c.WriteData(s, body, true)      // or c.Trailers(); c.Field(...); c.EndTrailers(s)
//	c.Release(s)                    // the consumer is done with s
//
// # What it does
//
//   - Preface, then the client's SETTINGS first; ours (128 concurrent
//     streams, the stream window, the header list size) and the
//     connection window's WINDOW_UPDATE are in the output from NewConn.
//     SETTINGS are acknowledged, PING answered, PRIORITY ignored (checked
//     for size and self-dependency only), GOAWAY from the client reported.
//   - Streams follow RFC 9113 §5.1: idle, open, half-closed (remote),
//     closed. A stream the server ends is closed at once: when the client
//     has not ended its side, the rest of its body is refused with
//     RST_STREAM(NO_ERROR) (§8.1), so half-closed (local) never lasts.
//     Stream errors (a malformed head, DATA after END_STREAM, a stream
//     window exceeded, WINDOW_UPDATE of 0 on a stream) reset the stream;
//     connection errors (frames on idle streams, HEADERS on a closed
//     stream, an even or decreasing stream ID, a frame over 16384 bytes,
//     bad SETTINGS, HPACK errors, the connection window exceeded) send
//     GOAWAY with the last stream ID and end the connection (Feed's
//     ConnError). The error codes are the RFC's.
//   - Request heads are decoded with golang.org/x/net/http2/hpack (its
//     string length capped at MaxHeaderListSize) into a per-stream arena:
//     fields are spans of one byte slice, no map, no string per field
//     beyond what the decoder makes. Pseudo-fields are checked (present,
//     not repeated, first, known; :method a token, :path origin-form
//     without spaces or controls, "*" for OPTIONS only: the head becomes
//     an HTTP/1.1 request line, and an absolute-form :path would carry a
//     second authority), names lower case, values without controls but
//     HTAB and without SP or HTAB at either end (RFC 9113 §8.2.1: the
//     stream is reset with PROTOCOL_ERROR), connection-specific
//     fields and a TE other than "trailers" refused, content-length
//     checked against the DATA that comes. A head over MaxHeaderListSize
//     is answered 431 here and never surfaces. Request trailers end the
//     body and are checked, not kept.
//   - Response heads are encoded without the dynamic table: literal fields
//     without indexing, names indexed from the static table, Huffman when
//     shorter (hpackenc.go says why). HEADERS are split into CONTINUATION
//     frames at the client's MAX_FRAME_SIZE.
//   - The table's size is still the client's to lower: when its
//     SETTINGS_HEADER_TABLE_SIZE goes below the size in force (4096 at
//     first), the first header block written after the acknowledgement
//     starts with a Dynamic Table Size Update (RFC 7541 §4.2; nghttp2
//     refuses a block without one). The encoder's size follows the
//     setting down only -- an empty table has no use for more room -- so
//     one update, to the smallest size set since the last block, is both
//     the smallest and the final one the RFC asks for. It is added where
//     a block takes its place in the output (writeBlock), so trailers
//     built before the SETTINGS and sent after carry it too.
//   - Flow control: DATA goes out as far as the client's connection and
//     stream windows and its frame size allow; the rest waits in the
//     stream and leaves as WINDOW_UPDATEs (or a larger
//     INITIAL_WINDOW_SIZE) come, trailers after it; EvWritable says when
//     it is all out. Our receive windows are refilled as the consumer
//     reads (ReadBody), by WINDOW_UPDATEs sent once half a window is
//     owed; body bytes nobody will read (a stream reset or ended) go back
//     to the connection window at once. A stream's buffered body is thus
//     at most StreamWindow, a connection's at most ConnWindow.
//   - Limits: more than MaxConcurrentStreams open streams: the new one is
//     refused with RST_STREAM(REFUSED_STREAM), its block still decoded so
//     the HPACK table stays in step. A header block of more than 128
//     CONTINUATION frames, or more than MaxHeaderListSize + 64 KiB of
//     encoded bytes, ends the connection with ENHANCE_YOUR_CALM (the
//     CONTINUATION flood, CVE-2023-45288). Rapid reset
//     (CVE-2023-44487): the rule x/net's guard in proxy/h2guard.go
//     applies too (ResetMeter, reset.go) -- past ResetLimit RST_STREAM
//     frames (100) that are also over a quarter of the streams whose
//     request surfaced (refused or malformed heads do not count),
//     GOAWAY(ENHANCE_YOUR_CALM) and Flooded. A stream error the client
//     provokes on a stream it opened (a WINDOW_UPDATE of 0, DATA after
//     END_STREAM, a window overflow: "MadeYouReset", CVE-2025-8671)
//     counts as one of its resets. Suspect (over one stream in eight
//     reset) tells the driver to hold new streams a moment. A reset that
//     arrives in the same read as its HEADERS is seen before the driver
//     dispatches anything, since events are taken after the whole read
//     is fed.
//   - The rule counts a rate, not a lifetime: resets and streams decay
//     exponentially with time constant ResetWindow (10 s), on the clock
//     Config.Now (read once per Feed; tests drive a manual one). A
//     steady ρ resets a second hold about ρ·ResetWindow, never more, so a
//     long-lived connection that cancels as a habit (a typeahead search,
//     a few a second) is never cut, however long it lives; a burst of 101
//     resets, or a flood paced above ResetLimit per ResetWindow (10 a
//     second), still is. (Envoy
//     counts premature resets as a share of the connection's life;
//     nginx counts none, but its keepalive_requests ends long lives.) A
//     decaying count keeps the burst protection without making age a
//     cause, and the limit and the ratio keep their form: a clock that
//     does not move gives the lifetime rule. Suspicion fades the same way
//     once the resets stop; a connection that keeps resetting more than
//     one stream in eight stays suspect however slowly it does so.
//   - GoAway starts a graceful close: GOAWAY(NO_ERROR) with the last
//     stream ID; later streams are decoded and dropped. A GOAWAY after it
//     (a connection error during the drain) repeats that ID: the dropped
//     streams were not processed, and the last-stream-id never grows
//     (RFC 9113 §6.8).
//
// # Memory and allocation
//
// Streams are pooled per connection (a free list of up to 64), with their
// arenas, field slices and body buffers kept when small. Feeding a GET
// and writing its answer allocates nothing once the connection is warm
// (TestHeadAllocations), except the strings x/net's hpack decoder makes
// for literal fields. A partial frame is copied between Feeds (at most
// 16 KiB + 9); everything else is parsed where it lies.
//
// # Conformance
//
// h2spec v2.2.1 (github.com/summerwind/h2spec) in strict mode (-S), 146
// cases, against sentry with this server, over TLS (the loops' driver and
// the goroutine one) and over h2c: all pass. On an h2c listener the
// invalid-preface case is decided before any byte reaches this core: a
// first line that is neither the preface nor an HTTP/1.x request line
// closes the connection (proxy/h2c.go). nghttp2's h2load with
// --header-table-size=0 and 1024 holds the table-size update to its
// strict decoder. CI runs both against the binary, with grpc-go's interop
// suite, OpenSSL and testssl (e2e/conformance, whose doc.go says what
// each proves). x/net's server (SENTRY_H2_SERVER=xnet) fails 4 h2spec
// cases: connection-specific and TE fields, repeated
// INITIAL_WINDOW_SIZE settings and an oversized HEADERS frame.
//
// # Not done
//
// Server push (never sent; ENABLE_PUSH from a client is only checked),
// priorities (ignored, as RFC 9113 allows), the HTTP/1.1 Upgrade to h2c,
// extended CONNECT (RFC 8441), and a SETTINGS timeout for a client that
// never acknowledges ours.
package h2srv
