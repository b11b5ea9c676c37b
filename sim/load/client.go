package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is the generator's HTTP/1.1 client (doc.go, "The client"): a
// keep-alive pool of connections per target, each request written from
// bytes prepared once and its response read with http.ReadResponse on
// the request's own goroutine. Safe for concurrent use; one Client may
// serve several runs (CloseIdle ends its idle connections).
type Client struct {
	dialer  net.Dialer
	maxIdle int

	mu    sync.Mutex
	pools map[string]*pool // by target URL
}

// NewClient builds the default client: keep-alive, as many idle
// connections per target as MaxInFlight (open loop needs one connection
// per request in flight), a 5 s dial timeout.
func NewClient(cfg Config) *Client { return newClient(cfg, nil) }

// newClient is NewClient with connections made from local (nil: the
// system's choice).
func newClient(cfg Config, local net.Addr) *Client {
	n := cfg.MaxInFlight
	if n <= 0 {
		n = 10000
	}
	return &Client{
		dialer:  net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: local},
		maxIdle: n,
		pools:   map[string]*pool{},
	}
}

// CloseIdle closes every idle connection.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pools {
		p.closeIdle()
	}
}

// pool is one target's connections.
type pool struct {
	c      *Client
	addr   string      // host:port to dial
	tlsCfg *tls.Config // https: the handshake's; nil for http

	mu   sync.Mutex
	idle []*clientConn // LIFO: the warmest connection first
}

type clientConn struct {
	nc   net.Conn
	br   *bufio.Reader
	idle time.Time // when it went back to the pool
}

// idleTimeout is how long a connection may wait in the pool before it is
// closed instead of used (net/http's IdleConnTimeout was 30 s in the
// Transport the generator used before): under the peers' own idle
// timeouts (the haproxy and nginx peers' 30 s, sentry's 60 s), so that a
// request seldom meets a connection the server has closed.
const idleTimeout = 25 * time.Second

func (c *Client) pool(target string) (*pool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pools[target]; p != nil {
		return p, nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p := &pool{c: c, addr: net.JoinHostPort(u.Hostname(), port)}
	if u.Scheme == "https" {
		p.tlsCfg = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	}
	c.pools[target] = p
	return p, nil
}

// get takes the warmest idle connection; those idle too long are closed.
func (p *pool) get() *clientConn {
	now := time.Now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		cc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if now.Sub(cc.idle) < idleTimeout {
			return cc
		}
		cc.nc.Close()
	}
}

// put returns cc to the pool, and closes those at the pool's bottom (the
// longest idle) that have waited idleTimeout.
func (p *pool) put(cc *clientConn) {
	now := time.Now()
	cc.idle = now
	var expired []*clientConn
	p.mu.Lock()
	for len(p.idle) > 0 && now.Sub(p.idle[0].idle) >= idleTimeout {
		expired = append(expired, p.idle[0])
		p.idle[0] = nil
		p.idle = p.idle[1:]
	}
	full := len(p.idle) >= p.c.maxIdle
	if !full {
		p.idle = append(p.idle, cc)
	}
	p.mu.Unlock()
	if full {
		cc.nc.Close()
	}
	for _, e := range expired {
		e.nc.Close()
	}
}

func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, cc := range idle {
		cc.nc.Close()
	}
}

func (p *pool) dial(ctx context.Context) (*clientConn, error) {
	nc, err := p.c.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if p.tlsCfg != nil {
		tc := tls.Client(nc, p.tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	return &clientConn{nc: nc, br: bufio.NewReaderSize(nc, 4096)}, nil
}

// exchange is one request's outcome.
type exchange struct {
	status     int
	bytes      int64
	retryAfter string
	reject     string
}

// headRequest tells http.ReadResponse that a HEAD's response has no body.
var headRequest = &http.Request{Method: http.MethodHead}

// do sends wire (a whole HTTP/1.1 request) on a connection of p and
// reads the response, its body discarded and counted, by deadline; ctx
// cancels it early. With retry (an idempotent method), a request that a
// reused keep-alive connection lost before any response byte because the
// server had closed it (EOF, reset, broken pipe: not a timeout) is sent
// once more on a newly dialled connection, as net/http's Transport does.
func (p *pool) do(ctx context.Context, wire []byte, head, retry bool, deadline time.Time) (exchange, error) {
	cc := p.get()
	for attempt := 0; ; attempt++ {
		reused := cc != nil
		if cc == nil {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			var err error
			cc, err = p.dial(dctx)
			cancel()
			if err != nil {
				return exchange{}, err
			}
		}
		ex, keep, lost, err := cc.exchange(ctx, wire, head, deadline)
		if err == nil && keep {
			p.put(cc)
		} else {
			cc.nc.Close()
		}
		if err != nil && retry && reused && lost && attempt == 0 && ctx.Err() == nil {
			cc = nil // a new connection: the pool may hold more the server closed
			continue
		}
		return ex, err
	}
}

// exchange writes wire on cc and reads the response. keep says the
// connection can carry another request; lost that it failed before any
// byte of a response arrived because the server had closed it.
func (cc *clientConn) exchange(ctx context.Context, wire []byte, head bool, deadline time.Time) (ex exchange, keep, lost bool, err error) {
	cc.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { cc.nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			keep = false // the cancellation may yet set a deadline on it
		}
	}()
	if _, err = cc.nc.Write(wire); err != nil {
		return ex, false, closedByPeer(err), ctxErr(ctx, err)
	}
	if _, err = cc.br.Peek(1); err != nil {
		return ex, false, closedByPeer(err), ctxErr(ctx, err)
	}
	var req *http.Request
	if head {
		req = headRequest
	}
	var resp *http.Response
	for {
		if resp, err = http.ReadResponse(cc.br, req); err != nil {
			return ex, false, false, ctxErr(ctx, err)
		}
		// An interim 1xx (100 Continue, 103 Early Hints) precedes the
		// answer; 101 ends HTTP/1.1 on the connection.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	ex.status = resp.StatusCode
	ex.retryAfter = resp.Header.Get("Retry-After")
	ex.reject = resp.Header.Get(RejectHeader)
	ex.bytes, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return ex, false, false, ctxErr(ctx, err)
	}
	return ex, !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols && cc.br.Buffered() == 0, false, nil
}

// closedByPeer says err is the server having closed the connection, not
// a timeout or a cancellation.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ctxErr is err, or the context's error when ctx ended it (the deadline
// AfterFunc set is then the cause, not the network).
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return cerr
	}
	return err
}

// requestWire is the bytes of one request as net/http's Transport would
// write them (http.Request.Write: request line, Host, User-Agent, the
// header, Content-Length and the body).
func requestWire(method, target, path, host string, header http.Header, body string) ([]byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	if host != "" {
		req.Host = host
	}
	var b bytes.Buffer
	if err := req.Write(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
