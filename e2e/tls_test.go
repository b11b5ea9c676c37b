package e2e

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
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// writeCert writes a self-signed P-256 certificate for 127.0.0.1 named cn.
func writeCert(t *testing.T, cf, kf, cn string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// Written aside and renamed, as a certificate renewal does.
	for _, f := range []struct {
		path string
		blk  *pem.Block
	}{{cf, &pem.Block{Type: "CERTIFICATE", Bytes: der}}, {kf, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}}} {
		tmp := f.path + ".new"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(f.blk), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTLSCertReloadOnSIGHUP: the real binary, a TLS listener, the
// certificate files replaced and SIGHUP sent. New handshakes (HTTP/1.1
// and h2) get the new certificate; an HTTP/1.1 and an h2 connection opened
// before go on serving requests with the old one: nothing is dropped.
func TestTLSCertReloadOnSIGHUP(t *testing.T) {
	b := newTestBackend(t, "b1", 0)
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, cf, kf, "first")
	admin, listen := freePort(t), freePort(t)
	cfg := writeFile(t, "sentry.yaml", fmt.Sprintf(`
admin:
  listen: %s
apps:
  - name: web
    listen: %s
    tls: {cert: %s, key: %s}
    backends:
      static: [%s]
`, admin, listen, cf, kf, b.addr))
	p := startSentry(t, "http://"+admin+"/readyz", "run", "-config", cfg)

	// An HTTP/1.1 keep-alive connection and an h2 one, before.
	h1, err := tls.Dial("tcp", listen, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	br := bufio.NewReader(h1)
	h1get := func() int {
		t.Helper()
		h1.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(h1, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("HTTP/1.1 connection from before: %v", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("HTTP/1.1 connection from before: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	cn := func(st tls.ConnectionState) string { return st.PeerCertificates[0].Subject.CommonName }
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	h2 := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	h2get := func() (int, string) {
		t.Helper()
		resp, err := h2.Get("https://" + listen + "/")
		if err != nil {
			t.Fatalf("h2: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, cn(*resp.TLS)
	}
	if code := h1get(); code != 200 || cn(h1.ConnectionState()) != "first" {
		t.Fatalf("before: %d from %s", code, cn(h1.ConnectionState()))
	}
	if code, name := h2get(); code != 200 || name != "first" {
		t.Fatalf("h2 before: %d from %s", code, name)
	}

	writeCert(t, cf, kf, "second")
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, admin, `sentry_policy_reloads_total{result="success"}`, 1, 5*time.Second)

	c, err := tls.Dial("tcp", listen, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cn(c.ConnectionState()); got != "second" {
		t.Errorf("a new handshake after SIGHUP got %q, want second", got)
	}
	c.Close()
	if code := h1get(); code != 200 || cn(h1.ConnectionState()) != "first" {
		t.Errorf("HTTP/1.1 connection from before the reload: %d from %s", code, cn(h1.ConnectionState()))
	}
	if code, name := h2get(); code != 200 || name != "first" {
		t.Errorf("h2 connection from before the reload: %d from %s", code, name)
	}
}
