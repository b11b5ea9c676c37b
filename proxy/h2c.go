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
// preface or complete it. A complete preface is served by serveH2Conn, the
// TLS h2 path (same pipeline, admission, header policy, rapid-reset guard,
// gRPC rejection), with the bytes read replayed; anything else goes on to
// fasthttp with its bytes replayed, as before. The HTTP/1.1 Upgrade: h2c
// dance is not supported: such a request is relayed as HTTP/1.1 (gRPC
// clients use prior knowledge). Without h2c a preface gets 400, as ever.

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
	var buf [24]byte // len(h2Preface)
	n := 0
	if l.timeout > 0 {
		_ = raw.SetReadDeadline(time.Now().Add(l.timeout))
	}
	for n < len(h2Preface) && bytes.Equal(buf[:n], h2Preface[:n]) {
		m, err := raw.Read(buf[n:])
		n += m
		if err != nil {
			if bytes.Equal(buf[:n], h2Preface[:n]) {
				// Gone or timed out within the preface (or before any
				// byte): nothing to answer.
				return
			}
			break
		}
	}
	_ = raw.SetReadDeadline(time.Time{})
	c := &replayconn.Conn{Conn: raw, Pre: append([]byte(nil), buf[:n]...)}
	if n == len(h2Preface) && bytes.Equal(buf[:n], h2Preface) {
		// Served here, out of fasthttp's sight and drained the h2 way
		// (GOAWAY), as a TLS listener's h2 connections.
		_ = l.fe.serveH2Conn(c)
		return
	}
	l.leave(raw) // fasthttp counts it from now on (max_conns)
	select {
	case l.conns <- c:
		handedOff = true
	case <-l.closed:
	}
}
