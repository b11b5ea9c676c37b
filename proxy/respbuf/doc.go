// Package respbuf holds the part of a response body that its client has
// not taken yet, so that the backend is read at its own speed and its
// connection released once the response is in: a slow reader then costs
// sentry memory or disk, never a backend worker (docs/buffering.md gives
// the design for requests and responses, and the decisions).
//
// It has three parts, used by every engine alike:
//
//   - Budget: the process-wide account (server.response_buffer_total,
//     response_temp_file_total) and the limits of one response
//     (response_buffer, response_temp_file), swapped by a reload; its
//     counters and high-water marks are what the metrics read. One
//     Budget serves the event loops and the goroutine front ends.
//   - Buffer: one response's bytes in order, in 16 KiB memory blocks
//     charged as they are taken and given back as they are read, then in
//     an unlinked temporary file once memory is full. Reserve says
//     whether the next read from the backend can be taken whole (an event
//     loop asks before it reads); Write takes what fits (a goroutine that
//     can wait for its client). When neither memory nor file can take
//     more, the response goes on at its client's pace, as without a
//     buffer: memory is bounded whatever the number of slow readers.
//   - Streams: the one rule of which responses are never held back
//     (server-sent events, gRPC, X-Accel-Buffering: no).
//
// Invariants: a Buffer never holds more than its limits nor the budget
// more than its totals (charge is a compare-and-swap under the total);
// every byte charged is given back by Read or Close; a temporary file has
// no name from its first instant, and Close closes it, so neither a path
// nor a descriptor outlives the response.
package respbuf
