package proxy

import (
	"bytes"
	"net"
	"time"

	"github.com/sentry-proxy/sentry/internal/replayconn"
)

// h2c.go: HTTP/2 with prior knowledge on a plain listener (apps[].h2c,
// docs/policy.md). A plain front end whose listener has h2c puts a
// tlsListener without TLS (cfg nil) in front of fasthttp: each connection
// fasthttp would have accepted -- from the socket, or handed off by the
// event loops, which never serve a preface themselves (their parser takes
// HTTP/1.1 only) -- is first read until its bytes either leave the HTTP/2
// preface or complete it. A complete preface is served by serveOwnConn, as
// a TLS listener's h2 connections are (same pipeline, admission, header
// policy, rapid-reset guard, gRPC rejection), with the bytes read replayed; anything else goes on to
// fasthttp with its bytes replayed, as before. The HTTP/1.1 Upgrade: h2c
// dance is not supported: such a request is relayed as HTTP/1.1 (gRPC
// clients use prior knowledge). Without h2c a preface gets 400, as ever.
//
// What is neither is an invalid preface (RFC 9113 §3.4), and the
// connection is closed without an answer: a first line that ends without
// "HTTP/1.x" (h2spec's "INVALID CONNECTION PREFACE", a preface broken
// after "PRI * HTTP/2.0", an HTTP/0.9 "GET /") is not an HTTP/1.1
// request, whose request line always ends with its version; an HTTP/1.1
// 400 would be bytes an h2 client cannot read. Only a line already read
// whole is judged (the first read, or what the loops hand off): a line
// still coming goes to fasthttp as before.

// sniff reads the first bytes of raw, within the read-header timeout,
// and serves it as h2c or hands it to fasthttp.
func (l *tlsListener) sniff(raw net.Conn) {
	defer l.wg.Done()
	handedOff := false
	defer func() {
		if !handedOff {
			raw.Close()
		}
		l.leave(raw)
	}()
	var buf [sniffBuf]byte
	n := 0
	preface := func() bool { // what was read agrees with the preface
		k := min(n, len(h2Preface))
		return bytes.Equal(buf[:k], h2Preface[:k])
	}
	if l.timeout > 0 {
		_ = raw.SetReadDeadline(time.Now().Add(l.timeout))
	}
	for n < len(h2Preface) && preface() {
		m, err := raw.Read(buf[n:])
		n += m
		if err != nil {
			if preface() {
				// Gone or timed out within the preface (or before any
				// byte): nothing to answer.
				return
			}
			break
		}
	}
	_ = raw.SetReadDeadline(time.Time{})
	if !preface() && !http1Line(buf[:n]) {
		return // neither h2 nor HTTP/1.x: closed
	}
	c := &replayconn.Conn{Conn: raw, Pre: append([]byte(nil), buf[:n]...)}
	if n >= len(h2Preface) && preface() {
		// Served here, out of fasthttp's sight and drained the h2 way
		// (GOAWAY), as a TLS listener's h2 connections.
		l.fe.serveOwnConn(c)
		return
	}
	l.leave(raw) // fasthttp counts it from now on (max_conns)
	select {
	case l.conns <- c:
		handedOff = true
	case <-l.closed:
	}
}

// h2Preface is the HTTP/2 client connection preface (RFC 9113 §3.4).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// sniffBuf is how much sniff reads at most before it decides: the preface,
// or a first request line, whole in the usual first read.
const sniffBuf = 512

// http1Line reports whether b, the first bytes of a connection, may be an
// HTTP/1.x request: false only if its first line (after empty lines,
// which RFC 9112 §2.2 lets a server skip) is complete and does not end
// with "HTTP/1.".
func http1Line(b []byte) bool {
	b = bytes.TrimLeft(b, "\r\n")
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return true // not whole yet: fasthttp will see
	}
	line := bytes.TrimSuffix(b[:i], []byte("\r"))
	version := line[bytes.LastIndexByte(line, ' ')+1:]
	return bytes.HasPrefix(version, []byte("HTTP/1."))
}
