package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2"
)

// h2backend.go: HTTP/2 to backends, cleartext (h2c, prior knowledge) or
// over TLS (h2): backends.protocol (docs/request-path.md, "Backends over HTTP/2").

// h2Client is an app's HTTP/2 client to its backends: one
// golang.org/x/net/http2 Transport, whose connection pool keeps a
// connection (or a few, past the backend's stream limit) per backend
// address and multiplexes the app's requests over them as streams. It
// outlives snapshots (pipeline.AppShared.H2) so a reload keeps the
// connections, unless the way to reach the backends changed.
type h2Client struct {
	tr     *http2.Transport
	scheme string // "http" (h2c) or "https" (h2): the transport's choice of dial
}

// newH2Client builds the client for protocol (policy.ProtoH2C or
// ProtoH2). Connections are dialled by dialH2: the TCP connect and, for
// h2, the TLS handshake (which must agree on ALPN "h2") within
// timeouts.connect. Compression is left to the two ends (no
// Accept-Encoding is added, no body is decoded), and idle connections are
// pinged so that a dead one is noticed between requests, and closed after
// h2IdleConnTimeout without a stream (as HostClient's idle connections
// are), so that connections to backends gone from the pool (a DNS change,
// a reload) or to a dropped app do not stay open, pinged, for ever.
func newH2Client(protocol string, connect *atomic.Int64, tlsCfg *atomic.Pointer[tls.Config]) *h2Client {
	c := &h2Client{scheme: "http"}
	if protocol == policy.ProtoH2 {
		c.scheme = "https"
	}
	c.tr = &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		IdleConnTimeout:    h2IdleConnTimeout,
		MaxHeaderListSize:  backendHeaderBytes,
		ReadIdleTimeout:    30 * time.Second,
		PingTimeout:        15 * time.Second,
		DialTLSContext: func(ctx context.Context, _, addr string, _ *tls.Config) (net.Conn, error) {
			return dialH2(ctx, addr, time.Duration(connect.Load()), tlsCfg.Load())
		},
	}
	return c
}

// backendHeaderBytes bounds a backend's response head, as HostClient's
// read buffer bounds it over HTTP/1.1: x/net's own default is 10 MB. An
// HTTP/2 head over it (HPACK's decoded size, 32 bytes counted per field)
// fails the exchange with 502, as an oversized HTTP/1.1 head does.
const backendHeaderBytes = 16 << 10

// h2IdleConnTimeout closes an HTTP/2 backend connection that carried no
// stream for that long; HostClient's MaxIdleConnDuration is the same.
const h2IdleConnTimeout = 30 * time.Second

// dialH2 connects to a backend for HTTP/2: TCP, then TLS when cfg is set
// (h2), all within the connect timeout. The connection is not an
// idleConn: an HTTP/2 connection idles between streams by design, and
// its liveness is the transport's pings.
func dialH2(ctx context.Context, addr string, connect time.Duration, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connect)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &dialError{err: err}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAlive(true)
	}
	if cfg == nil {
		return c, nil
	}
	tc, err := tlsClient(ctx, c, addr, cfg)
	if err != nil {
		c.Close()
		return nil, &dialError{err: err}
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		tc.Close()
		return nil, &dialError{err: fmt.Errorf("backend did not agree to h2 in ALPN (got %q)", p)}
	}
	return tc, nil
}

// errH2Timeout marks an exchange whose response head did not come within
// timeouts.response.
var errH2Timeout = errors.New("proxy: backend response timeout")

// respTimer is timeouts.response for one attempt of relayH2: it runs
// from when the request has been sent whole -- at dispatch for a body
// held in sentry, at the end of a streamed one (h2ReqBody's onEnd) -- to
// the response head, and cancels the attempt when it expires. So a
// client's upload (an HTTP/1.1 body larger than the buffer; a gRPC
// client-streaming call) is not counted as the backend's time, as it is
// not for an HTTP/1.1 backend, whose response timeout starts when the
// request is written; the client's side has its own limits
// (server.body_timeout, body_min_rate).
type respTimer struct {
	d     time.Duration
	fired atomic.Bool // it expired: the attempt was cancelled
	mu    struct {
		sync.Mutex
		t    *time.Timer
		over bool // stopped for good: a later start is a no-op
	}
}

func newRespTimer(d time.Duration, cancel context.CancelFunc, now bool) *respTimer {
	r := &respTimer{d: d}
	r.mu.t = time.AfterFunc(d, func() { r.fired.Store(true); cancel() })
	if !now {
		r.mu.t.Stop()
	}
	return r
}

// start (re)starts the countdown, unless stop came first.
func (r *respTimer) start() {
	r.mu.Lock()
	if !r.mu.over {
		r.mu.t.Reset(r.d)
	}
	r.mu.Unlock()
}

// stop ends the countdown for good.
func (r *respTimer) stop() {
	r.mu.Lock()
	r.mu.over = true
	r.mu.t.Stop()
	r.mu.Unlock()
}

// errH2BodyAbandoned marks an HTTP/1.1 client's exchange whose response
// came but whose body could not be sent to its end (relayH2).
var errH2BodyAbandoned = errors.New("proxy: request body not sent to its end")

// errBodyStopped is what the transport reads from an h2ReqBody it (or
// relayH2) closed.
var errBodyStopped = errors.New("proxy: request body closed")

// h2ReqBody is a streamed client body as http2.Transport reads it. The
// transport reads on a goroutine of its own that can outlive RoundTrip,
// and it Closes the body when done with it, possibly while a Read is
// still under way (and returns from RoundTrip after that Close). Here
// Close waits for a Read in progress, and every Read after it fails
// without touching the client's body: once Close has returned, nothing
// reads the client's connection or the request's pooled buffer any more,
// and the handler may let them go. Close first makes a Read blocked on a
// client that sends nothing return (clientBody.stop: the h2 stream's body
// closed; a past read deadline on an HTTP/1.1 connection, which then
// closes after the response).
//
// A read error that is not the body's end and did not follow a Close is
// the client's (clientFailed): too slow, gone, or a malformed chunk.
type h2ReqBody struct {
	src      *clientBody
	stopping atomic.Bool // Close has begun
	ended    atomic.Bool // src is read no more (mu.end is set)
	stopped  atomic.Bool // Close called src.stop: a Read was (or might have been) cut
	fin      chan struct{}
	mu       struct {
		sync.Mutex        // held through each Read of src
		end        error  // io.EOF, the read error, or errBodyStopped: src is read no more
		client     error  // the client's failure, when end is one
		onEnd      func() // called when the body has been read to its end (respTimer.start)
	}
}

// setOnEnd sets what is called when the body has been read to its end.
func (b *h2ReqBody) setOnEnd(f func()) {
	b.mu.Lock()
	b.mu.onEnd = f
	b.mu.Unlock()
}

func newH2ReqBody(cb *clientBody) *h2ReqBody {
	return &h2ReqBody{src: cb, fin: make(chan struct{})}
}

func (b *h2ReqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.end != nil {
		return 0, b.mu.end
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		b.src.sentAt.Store(time.Now().UnixNano())
		if b.mu.onEnd != nil {
			b.mu.onEnd()
		}
	}
	if err != nil {
		if err != io.EOF && !b.stopping.Load() {
			b.mu.client = err
		}
		b.mu.end = err
		b.ended.Store(true)
		close(b.fin)
	}
	return n, err
}

// Close ends the reading of the body; it returns once no Read is under
// way. Idempotent.
func (b *h2ReqBody) Close() error {
	if !b.stopping.Swap(true) && !b.ended.Load() && b.src.stop != nil {
		b.stopped.Store(true)
		b.src.stop()
	}
	b.mu.Lock()
	if b.mu.end == nil {
		b.mu.end = errBodyStopped
		b.ended.Store(true)
		close(b.fin)
	}
	b.mu.Unlock()
	return nil
}

// complete tells whether the body was read to its end, and the client's
// connection left as it was (not stopped: a stop that raced the end of
// the body may have left a read deadline in the past).
func (b *h2ReqBody) complete() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.end == io.EOF && !b.stopped.Load()
}

// clientFailed tells whether the client's side of the body failed.
func (b *h2ReqBody) clientFailed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.client != nil
}

// outcome is how an exchange whose client failed ends (readOutcome).
func (b *h2ReqBody) outcome() pipeline.Outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	return readOutcome(b.mu.client, b.src.h1)
}

// relayH2 is relay for an app whose backends speak HTTP/2: it picks a
// backend as relay does (least loaded, one stream counted in flight until
// the response head), sends req as one stream and reads the response
// head into resp; the body streams (resp's body stream, read by the
// engine that writes it). The request body streams too when cb is set:
// an h2 client's concurrently with the response, so bidirectional gRPC
// works (flow control is the two transports'); an HTTP/1.1 client's is
// sent to its end before the response is relayed, as fasthttp does for an
// HTTP/1.1 backend, and if the backend answered without taking all of it
// the client's connection closes after the answer (clientBody.unread).
// Either way no read of the body outlives the exchange (h2ReqBody), and a
// failure of the client's side is the client's outcome, not the
// backend's. A failed connect is retried on another backend; nothing
// else is (a stream's request may have been seen).
//
// timeouts.response bounds the wait for the response head only, from
// when the request has been sent whole (respTimer): a stream may then
// stay quiet as long as its two ends like (gRPC streams do; a gRPC call's
// own deadline travels in grpc-timeout).
//
// ab, when set, is an h2 client stream's hold: its context cancels the
// backend stream when the client resets, and the response is left in
// ab.h2resp for the h2 front end to copy its trailers.
func (p *Proxy) relayH2(a *pipeline.App, c *h2Client, req *fasthttp.Request, resp *fasthttp.Response, cb *clientBody, ab *abortBody, tr *pipeline.Trace) (pipeline.Outcome, *pipeline.Upstream, int) {
	parent := context.Background()
	if ab != nil && ab.ab.ctx != nil {
		parent = ab.ab.ctx
	}
	target, err := url.ParseRequestURI(string(req.Header.RequestURI()))
	if err != nil {
		return pipeline.OutBadRequest, nil, 0
	}
	target.Scheme = c.scheme
	hdr := h2RequestHeader(req)
	host := string(req.Header.Host())
	method := string(req.Header.Method())
	cl := int64(req.Header.ContentLength())
	var body []byte
	if cb == nil {
		body = req.Body() // (with cb, req's body is cb's stream: Body would read it all)
	}
	replay := cb == nil && idempotent(req)
	// A streamed body goes to the transport as an h2ReqBody, so that its
	// reading ends by the time this exchange does. An h2 client's
	// (stream) is read while the response streams; an HTTP/1.1 client's
	// is sent whole before the response is relayed, as to an HTTP/1.1
	// backend.
	stream := ab != nil && ab.ab.ctx != nil
	var rb *h2ReqBody
	if cb != nil {
		rb = newH2ReqBody(cb)
	}

	var last *pipeline.Upstream
	for attempt := 1; ; attempt++ {
		b := a.Pool.Pick()
		if b == nil {
			if last != nil {
				return pipeline.OutBackendFailed, last, 0
			}
			return pipeline.OutNoBackend, nil, 0
		}
		u := b.Attachment.(*pipeline.Upstream)
		inService := int(b.Inflight())
		t := *target
		t.Host = u.Addr
		ctx, cancel := context.WithCancel(parent)
		hreq := (&http.Request{
			Method: method, URL: &t, Host: host, Header: hdr,
			Proto: "HTTP/2.0", ProtoMajor: 2,
		}).WithContext(ctx)
		setH2Body(hreq, rb, body, cl)
		timer := newRespTimer(time.Duration(a.Shared.Idle.Load()), cancel, rb == nil)
		if rb != nil {
			rb.setOnEnd(timer.start)
		}
		hresp, err := c.tr.RoundTrip(hreq)
		if err == nil && cb != nil {
			cb.headAt = time.Now().UnixNano()
		}
		if rb != nil && err == nil && !stream {
			err = awaitH2Body(ctx, cancel, rb, hresp, timer)
		}
		timer.stop()
		if rb != nil {
			closeH2Body(rb, cb, err, stream)
		}
		if err == nil {
			a.Pool.Release(b, true)
			if u.Answered() {
				p.log.Info("backend reachable again", "app", a.Name, "backend", u.Addr)
			}
			copyH2Response(resp, hresp, cancel)
			if ab != nil {
				ab.ab.h2resp = hresp
			}
			return pipeline.OutRelayed, u, inService
		}
		cancel()
		switch {
		case parent.Err() != nil:
			a.Pool.Release(b, true)
			return pipeline.OutClientGone, u, inService
		case rb != nil && rb.clientFailed():
			// The client's side of the body failed (too slow, gone,
			// malformed): its outcome, and no fault of the backend's.
			a.Pool.Release(b, true)
			return rb.outcome(), u, 0
		}
		o, again := p.h2Failed(a, b, req, tr, err, timer.fired.Load(), replay, attempt)
		if !again {
			return o, u, 0
		}
		last = u
	}
}

// awaitH2Body sends an HTTP/1.1 client's streamed body rb to its end
// (or until the transport stops reading it: the backend answered >299 or
// reset the stream) before the response is relayed, within
// timeouts.response from the head on (or from the body's end, when it
// came first). Its client connection's reader is then free again, and
// nothing of the body is read after the handler lets the request and its
// buffer go. errH2BodyAbandoned: the body did not end.
func awaitH2Body(ctx context.Context, cancel context.CancelFunc, rb *h2ReqBody, hresp *http.Response, timer *respTimer) error {
	timer.start()
	select {
	case <-rb.fin:
	case <-ctx.Done():
	}
	if ctx.Err() != nil || rb.clientFailed() {
		hresp.Body.Close() // the stream is abandoned, its reading stopped
		cancel()
		return errH2BodyAbandoned
	}
	return nil
}

// closeH2Body closes rb once no read of the client's body is under way or
// to come in an attempt that ended with err: the transport is done with
// it or never will be (Close waits for a Read in progress). A failed dial
// never reached the body, which the next backend then gets whole; an h2
// client's body (stream) of an answered attempt is read while the
// response streams.
func closeH2Body(rb *h2ReqBody, cb *clientBody, err error, stream bool) {
	if isDialError(err) || err == nil && stream {
		return
	}
	rb.Close()
	if err == nil && !rb.complete() {
		// Left unread in the client's connection, the rest of the body
		// would be read as the next request: the connection closes after
		// this response.
		cb.unread = true
	}
}

// h2RequestHeader is the header set an HTTP/2 backend gets for req: its
// fields less the framing and hop-by-hop ones (the header policy ran
// before), no User-Agent where the client sent none, and te: trailers for
// gRPC.
func h2RequestHeader(req *fasthttp.Request) http.Header {
	hdr := make(http.Header, 16)
	req.Header.VisitAll(func(k, v []byte) {
		switch pipeline.FieldKind(k) {
		case pipeline.KindHost, pipeline.KindContentLength, pipeline.KindTransferEncoding,
			pipeline.KindConnection, pipeline.KindUpgrade, pipeline.KindHopByHop, pipeline.KindExpect:
			return
		}
		hdr.Add(string(k), string(v))
	})
	if _, ok := hdr["User-Agent"]; !ok {
		// None from the client: none to the backend (http2.Transport
		// would add its own, as HostClient does not: NoDefaultUserAgentHeader).
		hdr["User-Agent"] = []string{""}
	}
	if pipeline.IsGRPC(req.Header.ContentType()) {
		// gRPC requires "te: trailers" (the one TE value HTTP/2 allows);
		// the header policy dropped the client's as hop-by-hop.
		hdr.Set("Te", "trailers")
	}
	return hdr
}

// setH2Body gives hreq its body: the streamed one (rb, of declared length
// cl or -1), the one held whole, or none.
func setH2Body(hreq *http.Request, rb *h2ReqBody, body []byte, cl int64) {
	switch {
	case rb != nil:
		hreq.Body, hreq.ContentLength = rb, -1
		if cl >= 0 {
			hreq.ContentLength = cl
		}
	case len(body) > 0:
		hreq.Body, hreq.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	default:
		hreq.Body, hreq.ContentLength = http.NoBody, 0
	}
}

// h2Failed settles an attempt on backend b that failed with err (not the
// client's doing): the outcome, the backend's health (a failed dial ejects
// it), the log line, and whether the one retry policy allows another
// attempt.
func (p *Proxy) h2Failed(a *pipeline.App, b *lb.Backend, req *fasthttp.Request, tr *pipeline.Trace, err error, timedOut, replay bool, attempt int) (pipeline.Outcome, bool) {
	u := b.Attachment.(*pipeline.Upstream)
	dial := isDialError(err)
	o := pipeline.OutBackendFailed
	if timedOut {
		err, o = errH2Timeout, pipeline.OutBackendTimeout
	}
	if dial {
		a.Pool.Eject(b)
	} else {
		a.Pool.Release(b, !pipeline.CountsAsFailure(o))
	}
	if dial && u.Unreachable() {
		p.log.Warn("backend unreachable; ejected until it answers again",
			pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", err}, req.Header.Peek(a.ReqID), tr)...)
	} else if p.log.IsDebug() {
		p.log.Debug("relay failed", pipeline.LogRequest([]any{"app", a.Name, "backend", u.Addr, "error", err}, req.Header.Peek(a.ReqID), tr)...)
	}
	f := pipeline.FailNoRetry
	if dial {
		f = pipeline.FailConnect
	}
	return o, pipeline.TryAgain(f, replay, attempt, false)
}

// copyH2Response sets the backend's response head on resp and its body as
// resp's stream; closing the stream (the engine does, when written or
// abandoned) ends the backend stream and releases its context (cancel).
func copyH2Response(resp *fasthttp.Response, hresp *http.Response, cancel context.CancelFunc) {
	resp.SetStatusCode(hresp.StatusCode)
	resp.Header.SetNoDefaultContentType(true) // none from the backend: none to the client
	for k, vs := range hresp.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
	cl := int(hresp.ContentLength)
	if cl < 0 {
		cl = -1
	}
	resp.SetBodyStream(&h2RespBody{rc: hresp.Body, cancel: cancel}, cl)
}

// h2RespBody is a backend stream's response body as the engines read it.
type h2RespBody struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
}

func (b *h2RespBody) Read(p []byte) (int, error) { return b.rc.Read(p) }

func (b *h2RespBody) Close() error {
	err := b.rc.Close()
	b.cancel()
	return err
}

// h2Probe is the active health check of an HTTP/2 backend: GET path as
// one stream over the app's transport, 2xx/3xx is up.
func h2Probe(ctx context.Context, c *h2Client, addr, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "sentry-health/1")
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if s := resp.StatusCode; s < 200 || s >= 400 {
		return fmt.Errorf("health check status %d", s)
	}
	return nil
}
