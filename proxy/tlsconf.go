package proxy

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/policy"
)

// tlsConfig is a TLS listener's configuration. Decisions (docs/request-path.md,
// "TLS"):
//
//   - The certificate comes from fe.cert through GetCertificate, so a
//     reload (SIGHUP re-reads the files, whether or not their names
//     changed: a renewed certificate is picked up) changes it for new
//     handshakes without touching the connections already up.
//   - TLS 1.2 and 1.3. TLS 1.2 is limited to ECDHE with AEAD ciphers
//     (AES-GCM, ChaCha20-Poly1305; Mozilla's "intermediate" list): the
//     CBC suites Go would otherwise accept are on HTTP/2's deny list (RFC
//     9113 appendix A), and a client that chose one with h2 could be sent
//     away after the handshake (§9.2.2). TLS 1.3's suites are all AEAD and
//     not configurable in Go; Go orders AES-GCM first when the CPU has
//     AES instructions, ChaCha20 otherwise.
//   - OCSP: the certificate carries the stapled response
//     (tls.Certificate.OCSPStaple) that policy.LoadCertificate read from
//     apps[].tls.ocsp and checked; crypto/tls sends it to clients that
//     ask (status_request), the event loops' TLS 1.3 connections included,
//     as their handshake is crypto/tls's.
//   - ALPN: h2 first, then http/1.1 (Go's server takes its own order).
//   - Session resumption: Go's session tickets, on by default. Without
//     SetSessionTicketKeys the server makes its ticket key at random and
//     rotates it every 24 hours, accepting tickets under the previous keys
//     for 7 days. The key is per process: after a restart or an upgrade
//     (SIGUSR2) clients make a full handshake once.
//   - Key log: a TLS 1.3 handshake that runs over a tls13.Tap (the
//     listener's, when loops take its connections over) gets a copy of
//     this configuration whose KeyLogWriter is the Tap's (tls13.TapConfig),
//     which is how the loops learn the traffic secrets. Nothing is written
//     anywhere; other handshakes use this configuration as it is.
//   - OCSP stapling is not done (it needs a fetcher and a cache of its
//     own; most browsers no longer ask for it).
func (fe *frontend) tlsConfig() *tls.Config {
	return tls13.TapConfig(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: tls12Suites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return fe.cert.Load(), nil
		},
	})
}

// tls12Suites are the TLS 1.2 cipher suites offered (see tlsConfig).
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// loadCerts loads the certificate of every TLS listener in snap, from its
// files, for Apply. Any pair (or OCSP response) that does not load
// refuses the snapshot; a stale OCSP response is left out, with a warning.
func (p *Proxy) loadCerts(snap *policy.Snapshot) (map[string]*tls.Certificate, error) {
	out := map[string]*tls.Certificate{}
	for _, l := range snap.Listeners {
		if l.TLS == nil {
			continue
		}
		c, stale, err := policy.LoadCertificate(l.TLS, time.Now())
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", l.Addr, err)
		}
		if stale != nil {
			p.log.Warn("serving without an OCSP staple", "listener", l.Addr, "error", stale)
		}
		out[l.Addr] = &c
	}
	return out, nil
}
