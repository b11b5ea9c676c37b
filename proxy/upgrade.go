package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
)

// maxUpgradeHead bounds the backend's response head on an Upgrade request.
const maxUpgradeHead = 16 << 10

var errUpgradeHead = errors.New("bad or oversized response head")

// upgrade relays a request carrying Connection: upgrade (WebSocket and the
// like). The request head goes to a fresh backend connection; if the backend
// answers 101 the client connection is hijacked and bytes are piped both
// ways until either side closes. Any other answer (at most 1 MiB) is
// relayed as a normal response. Once upgraded, the tunnel no longer counts
// as in flight for balancing and admission (a WebSocket is not a request in
// service); it does count toward draining on shutdown.
func (p *Proxy) upgrade(a *pipeline.App, ctx *fasthttp.RequestCtx) (pipeline.Outcome, *pipeline.Upstream) {
	b := a.Pool.Pick()
	if b == nil {
		p.writeError(ctx, a, pipeline.OutNoBackend)
		return pipeline.OutNoBackend, nil
	}
	u := b.Attachment.(*pipeline.Upstream)
	// Over TLS when the app's backends are (backends.tls): verified, the
	// handshake within timeouts.connect, as every other connection to
	// them.
	conn, err := dialBackend(u.Addr, time.Duration(a.Shared.Connect.Load()), a.Shared.TLS.Load())
	if err != nil {
		a.Pool.Eject(b)
		p.writeError(ctx, a, pipeline.OutBackendFailed)
		return pipeline.OutBackendFailed, u
	}
	timeout := time.Duration(a.Shared.Idle.Load())
	_ = conn.SetDeadline(time.Now().Add(timeout))
	req := &ctx.Request
	// The front end removed the client's Connection header with the other
	// hop-by-hop ones (stripHopByHop keeps Upgrade for this path).
	req.Header.Set(fasthttp.HeaderConnection, "Upgrade")
	if _, err = conn.Write(req.Header.Header()); err == nil && !req.IsBodyStream() && len(req.Body()) > 0 {
		_, err = conn.Write(req.Body())
	}
	br := bufio.NewReaderSize(conn, 4096)
	var head []byte
	if err == nil {
		head, err = readHead(br)
	}
	if err != nil {
		conn.Close()
		o := relayError(err)
		if errors.Is(err, errUpgradeHead) {
			o = pipeline.OutBackendFailed
		}
		a.Pool.Release(b, !pipeline.CountsAsFailure(o))
		p.writeError(ctx, a, o)
		return o, u
	}
	status := statusFromHead(head)
	if status != fasthttp.StatusSwitchingProtocols {
		// Not upgraded: relay it as an ordinary response, then drop the conn.
		defer conn.Close()
		resp := &ctx.Response
		resp.Reset()
		err := resp.ReadLimitBody(bufio.NewReader(io.MultiReader(bytes.NewReader(head), br)), maxUpgradeRefusal)
		a.Pool.Release(b, err == nil)
		if err != nil {
			p.writeError(ctx, a, pipeline.OutBackendFailed)
			return pipeline.OutBackendFailed, u
		}
		resp.Header.ResetConnectionClose()
		return pipeline.OutRelayed, u
	}
	_ = conn.SetDeadline(time.Time{})
	ctx.Response.SetStatusCode(status) // for metrics and the access log
	// Upgraded: from here on it is a tunnel, not a request in service.
	// It leaves the balancer's in-flight count, which admission reads as
	// η, so long-lived WebSockets cannot make the farm look full.
	a.Pool.Release(b, true)
	ctx.HijackSetNoResponse(true)
	// fasthttp runs the hijack handler only if the client connection is
	// still usable after the handler returns; if it never runs, the
	// backend connection must not leak.
	started := make(chan struct{})
	time.AfterFunc(hijackGrace, func() {
		select {
		case <-started:
		default:
			conn.Close()
		}
	})
	ctx.Hijack(func(c net.Conn) {
		close(started)
		p.tunnelCount.Add(1)
		defer p.tunnelCount.Add(-1)
		defer conn.Close()
		if _, err := c.Write(head); err != nil {
			return
		}
		if n := br.Buffered(); n > 0 {
			buf, _ := br.Peek(n)
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
		pipe(c, conn, p.stopTunnels)
	})
	return pipeline.OutRelayed, u
}

const (
	// maxUpgradeRefusal bounds a backend's non-101 answer to an Upgrade
	// request, which is read whole.
	maxUpgradeRefusal = 1 << 20
	// hijackGrace is how long a tunnel's backend connection waits for
	// fasthttp to start the hijack handler before it is closed.
	hijackGrace = 10 * time.Second
)

// pipe copies both ways until both directions end or stop is closed. When
// one direction ends, the write side of the other conn is half-closed so the
// peer sees EOF.
func pipe(client, backend net.Conn, stop <-chan struct{}) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go cp(backend, client)
	go cp(client, backend)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-stop:
		_ = client.Close()
		_ = backend.Close()
		<-done
	}
}

// readHead reads an HTTP response head (through the blank line).
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errUpgradeHead
			}
			return nil, err
		}
		head = append(head, line...)
		if len(head) > maxUpgradeHead {
			return nil, errUpgradeHead
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			return head, nil
		}
	}
}

// statusFromHead parses the status code of "HTTP/1.1 101 ...".
func statusFromHead(head []byte) int {
	sp := bytes.IndexByte(head, ' ')
	if sp < 0 || len(head) < sp+4 {
		return 0
	}
	n, err := strconv.Atoi(string(head[sp+1 : sp+4]))
	if err != nil {
		return 0
	}
	return n
}
