package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/sentry-proxy/sentry/policy"
)

// backendtls.go: TLS to backends (backends.tls; docs/request-path.md, "Backends over
// TLS and HTTP/2").

// backendTLSConfig builds the client TLS configuration of an app's
// backends, or nil for plain TCP. The files were checked when the policy
// loaded; they are read again here, so a reload picks up a renewed CA or
// client certificate. alpn is what the handshake offers: "http/1.1" for
// http1, "h2" for h2.
func backendTLSConfig(t *policy.BackendTLS, alpn string) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
		NextProtos:         []string{alpn},
		// Resumption: a reconnect after an idle close skips the full
		// handshake.
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
	}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("backends.tls.ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("backends.tls.ca: %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("backends.tls.cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// tlsClient runs the client handshake on c, a fresh connection to addr,
// within ctx (the connect timeout's remainder). Without a server_name the
// name verified (and sent as SNI unless it is an IP) is addr's host.
func tlsClient(ctx context.Context, c net.Conn, addr string, cfg *tls.Config) (*tls.Conn, error) {
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, &tlsError{err: err}
	}
	return tc, nil
}

// tlsError is a failed handshake with a backend: the cause (an unknown
// authority, a name mismatch, a refused client certificate) is named in
// the log line that reports the backend unreachable.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "tls handshake: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// isTLSError tells whether err is a failed backend handshake.
func isTLSError(err error) bool {
	var t *tlsError
	return errors.As(err, &t)
}

// backendLink names how an app reaches its backends, to tell a reload
// that changed it (its idle connections are then closed).
func backendLink(b policy.Backends) string {
	if b.TLS == nil {
		return "plain " + b.Protocol
	}
	return fmt.Sprintf("tls %s %+v", b.Protocol, *b.TLS)
}

// tlsRefused tells whether err is a TLS alert the backend sent after the
// handshake completed on sentry's side (a refused client certificate).
func tlsRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// dialBackend opens a connection of its own to a backend, for a tunnel
// (upgrade): TCP and, when cfg is set (backends.tls), the TLS handshake,
// both within connect.
func dialBackend(addr string, connect time.Duration, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connect)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || cfg == nil {
		return c, err
	}
	tc, err := tlsClient(ctx, c, addr, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}
