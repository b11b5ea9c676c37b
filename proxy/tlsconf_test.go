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
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/policy"
)

// writeCertAs writes a self-signed P-256 certificate for 127.0.0.1 with
// common name cn to cf and kf.
func writeCertAs(t *testing.T, cf, kf, cn string) { t.Helper(); writeCertFor(t, cf, kf, cn, time.Hour) }

// writeCertFor is writeCertAs with a certificate valid for valid.
func writeCertFor(t *testing.T, cf, kf, cn string, valid time.Duration) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(valid),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tlsProxy(t *testing.T, body string) (*harness, string, string) {
	t.Helper()
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	cf, kf := writeTestCert(t)
	writeCertAs(t, cf, kf, "first")
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
	})
	return h, cf, kf
}

// h1Conn is one HTTP/1.1 keep-alive connection over TLS.
type h1Conn struct {
	c  *tls.Conn
	br *bufio.Reader
}

func dialH1(t *testing.T, addr string, cfg *tls.Config) *h1Conn {
	t.Helper()
	if cfg == nil {
		cfg = &tls.Config{InsecureSkipVerify: true}
	}
	cfg.NextProtos = []string{"http/1.1"}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &h1Conn{c: c, br: bufio.NewReader(c)}
}

func (h *h1Conn) get(t *testing.T) string {
	t.Helper()
	h.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(h.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

func (h *h1Conn) cn() string { return h.c.ConnectionState().PeerCertificates[0].Subject.CommonName }

// TestTLSCertReload: Apply (what SIGHUP does) re-reads the certificate
// files. New handshakes, HTTP/1.1 and h2, get the new certificate;
// connections made before keep theirs and go on serving. A pair that no
// longer loads refuses the policy and leaves the certificate in force.
func TestTLSCertReload(t *testing.T) {
	h, cf, kf := tlsProxy(t, "ok")
	old1 := dialH1(t, h.addr, nil)
	if got := old1.get(t); got != "200 ok" || old1.cn() != "first" {
		t.Fatalf("before: %q from %q", got, old1.cn())
	}
	h2tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer h2tr.CloseIdleConnections()
	h2c := &http.Client{Transport: h2tr, Timeout: 5 * time.Second}
	h2get := func() (string, string) {
		t.Helper()
		resp, err := h2c.Get("https://" + h.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Proto, b), resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	if got, cn := h2get(); got != "200 HTTP/2.0 ok" || cn != "first" {
		t.Fatalf("h2 before: %q from %q", got, cn)
	}

	writeCertAs(t, cf, kf, "second")
	if err := h.p.Apply(h.snap); err != nil {
		t.Fatal(err)
	}
	if got := dialH1(t, h.addr, nil).cn(); got != "second" {
		t.Errorf("new HTTP/1.1 handshake after reload got %q, want second", got)
	}
	nt := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer nt.CloseIdleConnections()
	resp, err := (&http.Client{Transport: nt, Timeout: 5 * time.Second}).Get("https://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "second" {
		t.Errorf("new h2 handshake after reload got %q, want second", cn)
	}
	// The connections made before were not dropped.
	if got := old1.get(t); got != "200 ok" || old1.cn() != "first" {
		t.Errorf("HTTP/1.1 connection from before the reload: %q from %q", got, old1.cn())
	}
	if got, cn := h2get(); got != "200 HTTP/2.0 ok" || cn != "first" {
		t.Errorf("h2 connection from before the reload: %q from %q", got, cn)
	}

	// A broken pair: the reload fails, the second certificate stays.
	if err := os.WriteFile(kf, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Apply(h.snap); err == nil || !strings.Contains(err.Error(), h.addr) {
		t.Errorf("Apply with a broken key: %v, want an error naming the listener", err)
	}
	if got := dialH1(t, h.addr, nil).cn(); got != "second" {
		t.Errorf("after a failed reload the certificate is %q, want second", got)
	}
}

// TestTLSResumption: a client that comes back resumes its session with a
// ticket (no full handshake), on TLS 1.3 and 1.2.
func TestTLSResumption(t *testing.T) {
	h, _, _ := tlsProxy(t, "ok")
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		cache := tls.NewLRUClientSessionCache(4)
		cfg := func() *tls.Config {
			return &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, MinVersion: v, MaxVersion: v}
		}
		first := dialH1(t, h.addr, cfg())
		// TLS 1.3 tickets arrive after the handshake: a read takes them.
		if got := first.get(t); got != "200 ok" {
			t.Fatalf("%x: %q", v, got)
		}
		if first.c.ConnectionState().DidResume {
			t.Fatalf("%x: the first connection resumed", v)
		}
		first.c.Close()
		again := dialH1(t, h.addr, cfg())
		if got := again.get(t); got != "200 ok" {
			t.Fatalf("%x: %q", v, got)
		}
		if !again.c.ConnectionState().DidResume {
			t.Errorf("TLS %x: the second connection did not resume", v)
		}
	}
}

// TestTLSCiphersAndALPN: TLS 1.2 only with ECDHE and an AEAD cipher (a
// CBC suite, on HTTP/2's deny list, is refused at the handshake); below
// 1.2 nothing; ALPN picks h2 when offered, else http/1.1.
func TestTLSCiphersAndALPN(t *testing.T) {
	h, _, _ := tlsProxy(t, "ok")
	dial := func(cfg *tls.Config) (*tls.Conn, error) {
		cfg.InsecureSkipVerify = true
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", h.addr, cfg)
	}
	for _, cs := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA} {
		if c, err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{cs}}); err == nil {
			c.Close()
			t.Errorf("TLS 1.2 with %s was accepted", tls.CipherSuiteName(cs))
		}
	}
	if c, err := dial(&tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11}); err == nil {
		c.Close()
		t.Error("TLS 1.1 was accepted")
	}
	for _, cs := range tls12Suites[:1] {
		c, err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{cs}, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatalf("TLS 1.2 with %s: %v", tls.CipherSuiteName(cs), err)
		}
		if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Errorf("ALPN offered h2 and http/1.1: got %q", p)
		}
		c.Close()
	}
	c, err := dial(&tls.Config{NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if st := c.ConnectionState(); st.NegotiatedProtocol != "http/1.1" || st.Version != tls.VersionTLS13 {
		t.Errorf("ALPN http/1.1: got %q over %x, want http/1.1 over TLS 1.3", st.NegotiatedProtocol, st.Version)
	}
	c.Close()
}

// TestTLSTicketKeyRotation: tlsConfig leaves the ticket keys to Go, which
// makes a key at random, rotates it every 24 hours and accepts tickets
// under older keys for 7 days (a config that set its own keys would
// disable that). Driven by the config's clock.
func TestTLSTicketKeyRotation(t *testing.T) {
	// Valid past the clock's last step: a client does not resume a
	// session whose certificate has expired.
	cf, kf := writeTestCert(t)
	writeCertFor(t, cf, kf, "rotation", 30*24*time.Hour)
	cert, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	fe := &frontend{}
	fe.cert.Store(&cert)
	scfg := fe.tlsConfig()
	now := time.Now()
	scfg.Time = func() time.Time { return now }
	cache := tls.NewLRUClientSessionCache(4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	handshake := func() bool {
		t.Helper()
		// TCP, not net.Pipe: the two sides write at once in TLS 1.3
		// (tickets and the client's Finished), which a pipe deadlocks.
		b, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		deadline := time.Now().Add(5 * time.Second)
		a.SetDeadline(deadline)
		b.SetDeadline(deadline)
		srv := tls.Server(a, scfg)
		done := make(chan error, 1)
		go func() {
			if err := srv.Handshake(); err != nil {
				done <- err
				return
			}
			_, err := srv.Write([]byte("x")) // after the tickets
			done <- err
		}()
		cl := tls.Client(b, &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache,
			Time: func() time.Time { return now }})
		var one [1]byte
		if _, err := io.ReadFull(cl, one[:]); err != nil { // takes the tickets
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return cl.ConnectionState().DidResume
	}
	if handshake() {
		t.Fatal("the first handshake resumed")
	}
	if !handshake() {
		t.Fatal("no resumption a moment later")
	}
	now = now.Add(25 * time.Hour) // the key has rotated; the old one is still accepted
	if !handshake() {
		t.Error("a ticket from under the previous key was refused after one rotation")
	}
	now = now.Add(8 * 24 * time.Hour) // past every key's life
	if handshake() {
		t.Error("a ticket older than 7 days resumed")
	}
}
