package proxy

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/policy"
)

// testCA is a throwaway certificate authority for backend TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	file string
}

var serial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.file = filepath.Join(t.TempDir(), name+".pem")
	if err := os.WriteFile(ca.file, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a leaf for 127.0.0.1 and the DNS name "backend.test"
// (server) or a client certificate, and returns it as a tls.Certificate
// and as PEM files.
func (ca *testCA) issue(t *testing.T, client bool) (tls.Certificate, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"backend.test"},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses, tmpl.DNSNames = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cf, certPEM, 0o600)
	os.WriteFile(kf, keyPEM, 0o600)
	return pair, cf, kf
}

// tlsBackend starts an HTTPS backend with a certificate from ca; with
// clientCA set it requires a client certificate from that CA. It counts
// new connections and says whether the request came over TLS.
func tlsBackend(t *testing.T, ca, clientCA *testCA, conns *atomic.Int32) string {
	t.Helper()
	pair, _, _ := ca.issue(t, false)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := "none"
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			peer = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		fmt.Fprintf(w, "tls=%v proto=%s client=%s", r.TLS != nil, r.Proto, peer)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		s.TLS.ClientCAs, s.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew && conns != nil {
			conns.Add(1)
		}
	}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// TestBackendTLS: backends.tls verifies by default (an unknown CA or a
// wrong server_name is a 502 with the cause logged, and, as any failed
// connect, ejects the backend until it answers again), a configured CA
// verifies, insecure_skip_verify skips, a client certificate makes
// mutual TLS work, connections are reused, and such an app is not served
// by the event loops.
func TestBackendTLS(t *testing.T) {
	ca := newTestCA(t, "backend-ca")
	clientCA := newTestCA(t, "client-ca")
	_, clientCert, clientKey := clientCA.issue(t, true)
	var conns atomic.Int32
	be := tlsBackend(t, ca, nil, &conns)
	mtlsBE := tlsBackend(t, ca, clientCA, nil)

	for _, c := range []struct {
		name   string
		be     string
		tls    policy.BackendTLS
		status int
		body   string // prefix of the body on 200
		cause  string // in the WARN line on 502
	}{
		{"system roots do not know the CA", be, policy.BackendTLS{}, 502, "", "certificate signed by unknown authority"},
		{"the CA verifies", be, policy.BackendTLS{CAFile: ca.file}, 200, "tls=true proto=HTTP/1.1 client=none", ""},
		{"server_name verified", be, policy.BackendTLS{CAFile: ca.file, ServerName: "backend.test"}, 200, "tls=true", ""},
		{"server_name mismatch", be, policy.BackendTLS{CAFile: ca.file, ServerName: "other.test"}, 502, "", "other.test"},
		{"insecure_skip_verify", be, policy.BackendTLS{InsecureSkipVerify: true}, 200, "tls=true", ""},
		{"mutual TLS", mtlsBE, policy.BackendTLS{CAFile: ca.file, CertFile: clientCert, KeyFile: clientKey}, 200, "tls=true proto=HTTP/1.1 client=leaf", ""},
		{"mutual TLS without a client certificate", mtlsBE, policy.BackendTLS{CAFile: ca.file}, 502, "", "certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuf
			lg := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})
			bt := c.tls
			h := startProxyOpts(t, []string{c.be}, Options{Logger: lg}, func(_ *policy.Snapshot, a *policy.App) {
				a.Backends.TLS = &bt
				a.Backends.Protocol = policy.ProtoHTTP1
			})
			if h.p.cur.Load().apps[0].LoopOK {
				t.Fatal("an app with TLS backends is served by the event loops")
			}
			before := conns.Load()
			n := 3
			if c.status == 502 {
				n = 1 // the failed connect ejects the backend: the next get 503 no_backend
			}
			for i := 0; i < n; i++ {
				resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				if resp.StatusCode != c.status {
					t.Fatalf("request %d: %d %q, want %d", i, resp.StatusCode, body, c.status)
				}
				if c.status == 200 && !strings.HasPrefix(body, c.body) {
					t.Fatalf("body %q, want %q...", body, c.body)
				}
			}
			if c.status == 502 {
				if l := logs.String(); !strings.Contains(l, c.cause) || !strings.Contains(l, "tls") {
					t.Errorf("log does not name the cause %q:\n%s", c.cause, l)
				}
			}
			if c.be == be && c.status == 200 {
				if n := conns.Load() - before; n != 1 {
					t.Errorf("%d backend connections for 3 sequential requests, want 1 (reuse)", n)
				}
			}
		})
	}
}

// TestBackendTLSProbe: the active health check reaches a TLS backend over
// TLS (and verifies it): probes arrive (each on its own connection) and,
// with fall 1, a single failed probe would mark the backend down; it
// stays up and serves.
func TestBackendTLSProbe(t *testing.T) {
	ca := newTestCA(t, "probe-ca")
	var conns atomic.Int32
	be := tlsBackend(t, ca, nil, &conns)
	h := startProxyOpts(t, []string{be}, Options{}, func(_ *policy.Snapshot, a *policy.App) {
		a.Backends.TLS = &policy.BackendTLS{CAFile: ca.file}
		a.Health.Active = &policy.ActiveHealth{Path: "/", Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 1}
	})
	a := h.p.cur.Load().apps[0]
	for i := 0; i < 200 && conns.Load() < 4; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := conns.Load(); n < 4 {
		t.Fatalf("%d probe connections in 2 s, want ≥ 4", n)
	}
	if a.Pool.Healthy() != 1 {
		t.Fatal("TLS backend probed down")
	}
	resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "tls=true") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// logBuf is a goroutine-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *logBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBackendTLSReload: a reload that changes backends.tls applies to the
// next request at once: the idle connection made under the old settings
// is not reused. Verification skipped, then on with a CA that does not
// know the backend: the next request is refused (502), then a reload
// with the right CA serves again.
func TestBackendTLSReload(t *testing.T) {
	ca, other := newTestCA(t, "reload-ca"), newTestCA(t, "other-ca")
	var conns atomic.Int32
	be := tlsBackend(t, ca, nil, &conns)
	with := func(bt policy.BackendTLS) func(*policy.Snapshot, *policy.App) {
		return func(_ *policy.Snapshot, a *policy.App) {
			a.Backends.TLS = &bt
			a.Health.Passive.Failures = 0 // keep the backend in the pool after the refusal
		}
	}
	h := startProxy(t, []string{be}, with(policy.BackendTLS{InsecureSkipVerify: true}))
	get := func() int {
		resp, _ := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		return resp.StatusCode
	}
	if s := get(); s != 200 {
		t.Fatalf("skip-verify: %d", s)
	}
	if err := h.p.Apply(testSnap(h.addr, []string{be}, with(policy.BackendTLS{CAFile: other.file}))); err != nil {
		t.Fatal(err)
	}
	if s := get(); s != 502 {
		t.Fatalf("after the reload to a CA that does not know the backend: %d, want 502 (the old connection was reused?)", s)
	}
	if err := h.p.Apply(testSnap(h.addr, []string{be}, with(policy.BackendTLS{CAFile: ca.file}))); err != nil {
		t.Fatal(err)
	}
	// The failed connect ejected the backend until it answers again; the
	// next pick after the ejection tries it (half-open) or, with the
	// pool empty, answers 503: allow one such answer.
	s := get()
	if s == 503 {
		time.Sleep(50 * time.Millisecond)
		s = get()
	}
	if s != 200 {
		t.Fatalf("after the reload to the right CA: %d, want 200", s)
	}
}

// TestBackendTLSUpgrade: an upgrade (a WebSocket) to an app whose
// backends speak TLS goes over TLS too, verified with backends.tls.ca --
// not as plaintext to the backend's TLS port -- and the tunnel works; a
// backend the CA does not know gets no request (502).
func TestBackendTLSUpgrade(t *testing.T) {
	ca, other := newTestCA(t, "upgrade-ca"), newTestCA(t, "other-ca")
	pair, _, _ := ca.issue(t, false)
	var sawTLS atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || r.TLS == nil {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		sawTLS.Add(1)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 1024)
		for {
			n, err := brw.Read(buf)
			if err != nil {
				return
			}
			c.Write([]byte(strings.ToUpper(string(buf[:n]))))
		}
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	be := s.Listener.Addr().String()
	for _, c := range []struct {
		name string
		ca   *testCA
		ok   bool
	}{{"verified", ca, true}, {"unknown CA", other, false}} {
		t.Run(c.name, func(t *testing.T) {
			before := sawTLS.Load()
			h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
				a.Backends.TLS = &policy.BackendTLS{CAFile: c.ca.file}
			})
			conn, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !c.ok {
				if resp.StatusCode != 502 || sawTLS.Load() != before {
					t.Fatalf("unknown CA: %d, backend reached %d times, want 502 and none", resp.StatusCode, sawTLS.Load()-before)
				}
				return
			}
			if resp.StatusCode != 101 {
				t.Fatalf("upgrade: %d, want 101", resp.StatusCode)
			}
			io.WriteString(conn, "hello")
			buf := make([]byte, 5)
			if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "HELLO" {
				t.Fatalf("echo: %q %v", buf, err)
			}
		})
	}
}

// TestBackendTLSSNI: server_name is sent as the SNI, with verification
// and without it (insecure_skip_verify); without server_name a backend
// given by IP gets none.
func TestBackendTLSSNI(t *testing.T) {
	ca := newTestCA(t, "sni-ca")
	pair, _, _ := ca.issue(t, false)
	sni := make(chan string, 4)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	s.TLS = &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni <- h.ServerName
		return nil, nil
	}, Certificates: []tls.Certificate{pair}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.StartTLS()
	t.Cleanup(s.Close)
	be := s.Listener.Addr().String()
	for _, c := range []struct {
		name string
		bt   policy.BackendTLS
		want string
	}{
		{"skip verify", policy.BackendTLS{InsecureSkipVerify: true, ServerName: "backend.internal"}, "backend.internal"},
		{"by IP", policy.BackendTLS{CAFile: ca.file}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) { bt := c.bt; a.Backends.TLS = &bt })
			if resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatalf("%d %q", resp.StatusCode, body)
			}
			select {
			case got := <-sni:
				if got != c.want {
					t.Errorf("SNI %q, want %q", got, c.want)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("no handshake seen")
			}
		})
	}
}

// TestH2BackendTLSVerification: protocol h2 verifies the backend as http1
// over TLS does (an unknown CA is a 502, the cause logged) and insists on
// ALPN h2 (a backend that speaks only HTTP/1.1 over TLS is a 502 naming
// that); with the right CA and h2 it serves over HTTP/2.
func TestH2BackendTLSVerification(t *testing.T) {
	ca, other := newTestCA(t, "h2-ca"), newTestCA(t, "other-ca")
	pair, _, _ := ca.issue(t, false)
	start := func(h2 bool) string {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "proto=%s", r.Proto)
		}))
		s.EnableHTTP2 = h2
		s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		s.StartTLS()
		t.Cleanup(s.Close)
		return s.Listener.Addr().String()
	}
	h2be, h1be := start(true), start(false)
	for _, c := range []struct {
		name   string
		be     string
		ca     *testCA
		status int
		want   string // body on 200, the logged cause on 502
	}{
		{"verified", h2be, ca, 200, "proto=HTTP/2.0"},
		{"unknown CA", h2be, other, 502, "certificate signed by unknown authority"},
		// Go's server refuses the handshake itself (an alert); one that
		// completes it without ALPN gets dialH2's "did not agree to h2".
		{"no h2 in ALPN", h1be, ca, 502, "no application protocol"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuf
			lg := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})
			h := startProxyOpts(t, []string{c.be}, Options{Logger: lg}, func(_ *policy.Snapshot, a *policy.App) {
				a.Backends.Protocol = policy.ProtoH2
				a.Backends.TLS = &policy.BackendTLS{CAFile: c.ca.file}
			})
			resp, body := rawRequest(t, h.addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != c.status {
				t.Fatalf("%d %q, want %d", resp.StatusCode, body, c.status)
			}
			if c.status == 200 && body != c.want {
				t.Errorf("body %q, want %q", body, c.want)
			}
			if c.status == 502 && !strings.Contains(logs.String(), c.want) {
				t.Errorf("log does not name the cause %q:\n%s", c.want, logs.String())
			}
		})
	}
}

// TestRefusedPolicyChangesNoLimit: a policy refused because an app cannot
// be built (a CA file that does not exist) leaves the buffers' limits of
// the policy in force, as it leaves everything else.
func TestRefusedPolicyChangesNoLimit(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := startProxy(t, []string{be}, nil)
	reqTotal, resp := h.p.bufs.cap.Load(), *h.p.resp.Limits()
	bad := testSnap(h.addr, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		s.Server.RequestBufferTotal = reqTotal / 2
		s.Server.ResponseBufferTotal = resp.MemTotal / 2
		a.Backends.TLS = &policy.BackendTLS{CAFile: filepath.Join(t.TempDir(), "missing.pem")}
	})
	if err := h.p.Apply(bad); err == nil {
		t.Fatal("a policy with a missing CA file was applied")
	}
	if got := h.p.bufs.cap.Load(); got != reqTotal {
		t.Errorf("request_buffer_total %d after the refused policy, want %d", got, reqTotal)
	}
	if got := *h.p.resp.Limits(); got != resp {
		t.Errorf("response buffer limits %+v after the refused policy, want %+v", got, resp)
	}
}
