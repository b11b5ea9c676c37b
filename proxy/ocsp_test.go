package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"
	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/internal/testpki"
	"github.com/sentry-proxy/sentry/policy"
)

// TestOCSPStapled: with apps[].tls.ocsp, the response is stapled to
// every handshake that asks for it, HTTP/1.1 (TLS 1.3 and 1.2) and h2; a
// reload (Apply, what SIGHUP does) staples the file's new content, is
// refused by a revoked response (the staple in force stays), and takes a
// stale one without a staple.
func TestOCSPStapled(t *testing.T) {
	dir := t.TempDir()
	pki, err := testpki.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	resp1, err := pki.OCSP(ocsp.Good, nil, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	of := filepath.Join(dir, "leaf.ocsp")
	if err := os.WriteFile(of, resp1, 0o600); err != nil {
		t.Fatal(err)
	}
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := startProxy(t, []string{be}, func(_ *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: pki.CertFile, KeyFile: pki.KeyFile, OCSPFile: of}
	})
	staple := func(v uint16) []byte {
		t.Helper()
		c := dialH1(t, h.addr, &tls.Config{InsecureSkipVerify: true, MinVersion: v, MaxVersion: v})
		if got := c.get(t); got != "200 ok" {
			t.Fatalf("TLS %x: %q", v, got)
		}
		return c.c.ConnectionState().OCSPResponse
	}
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		if got := staple(v); string(got) != string(resp1) {
			t.Errorf("TLS %x: stapled %d bytes, want the file's %d", v, len(got), len(resp1))
		}
	}
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	r, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.ProtoMajor != 2 || string(r.TLS.OCSPResponse) != string(resp1) {
		t.Errorf("h2: %s, stapled %d bytes, want the file's %d", r.Proto, len(r.TLS.OCSPResponse), len(resp1))
	}

	resp2, err := pki.OCSP(ocsp.Good, nil, time.Now().Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(of, resp2, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Apply(h.snap); err != nil {
		t.Fatal(err)
	}
	if got := staple(tls.VersionTLS13); string(got) != string(resp2) {
		t.Errorf("after the reload: stapled %d bytes, not the new response", len(got))
	}

	// A revoked response refuses the reload: the staple in force stays.
	revoked, err := pki.OCSP(ocsp.Revoked, nil, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(of, revoked, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Apply(h.snap); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("reload with a revoked response: %v, want it refused", err)
	}
	if got := staple(tls.VersionTLS13); string(got) != string(resp2) {
		t.Errorf("after a refused reload: stapled %d bytes, not the response in force", len(got))
	}

	// A stale one is taken without a staple: the listener keeps serving.
	stale, err := pki.OCSP(ocsp.Good, nil, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(of, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Apply(h.snap); err != nil {
		t.Fatalf("reload with a stale response: %v, want it taken without a staple", err)
	}
	if got := staple(tls.VersionTLS13); len(got) != 0 {
		t.Errorf("stale response: stapled %d bytes, want none", len(got))
	}
}
