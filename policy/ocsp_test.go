package policy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"

	"github.com/sentry-proxy/sentry/internal/testpki"
)

// TestOCSPStaple: apps[].tls.ocsp names a DER OCSP response that is
// stapled to the certificate; one that would hurt stapled (garbage, for
// another certificate, signed by someone else than the issuer in the
// chain or by a delegated responder not marked for OCSP signing, revoked,
// unknown, a responder's error) refuses the policy at its line; without
// the issuer in the file the signature is not checked; one past its
// nextUpdate is accepted and not stapled (stale).
func TestOCSPStaple(t *testing.T) {
	dir := t.TempDir()
	pki, err := testpki.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	der := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(name string, b []byte) string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	good := write("good.der", der(pki.OCSP(ocsp.Good, nil, time.Now().Add(time.Hour))))
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cases := []struct {
		name, cert, file, err string
	}{
		{"good", pki.CertFile, good, ""},
		{"good, no issuer in the file", pki.LeafOnlyFile, good, ""},
		{"no nextUpdate", pki.CertFile, write("nonext.der", der(pki.OCSP(ocsp.Good, nil, time.Time{}))), ""},
		{"garbage", pki.CertFile, write("garbage.der", []byte("not DER")), "not a valid OCSP response"},
		{"another certificate", pki.CertFile, write("serial.der", der(pki.OCSP(ocsp.Good, big.NewInt(7), time.Time{}))), "not a valid OCSP response"},
		{"signed by another key", pki.CertFile, write("forged.der", der(pki.OCSPSignedBy(other))), "not a valid OCSP response"},
		{"forged, no issuer to check it", pki.LeafOnlyFile, write("forged2.der", der(pki.OCSPSignedBy(other))), ""},
		{"revoked", pki.CertFile, write("revoked.der", der(pki.OCSP(ocsp.Revoked, nil, time.Time{}))), "revoked"},
		{"unknown", pki.CertFile, write("unknown.der", der(pki.OCSP(ocsp.Unknown, nil, time.Time{}))), "unknown"},
		{"responder error", pki.CertFile, write("unauth.der", ocsp.UnauthorizedErrorResponse), `the responder answered "unauthorized"`},
		{"delegated responder", pki.CertFile, write("deleg.der", der(pki.OCSPDelegated(true))), ""},
		{"delegated, not for OCSP", pki.CertFile, write("deleg2.der", der(pki.OCSPDelegated(false))), "not marked for OCSP signing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := &TLS{CertFile: c.cert, KeyFile: pki.KeyFile, OCSPFile: c.file}
			cert, stale, err := LoadCertificate(tl, time.Now())
			if stale != nil {
				t.Fatalf("stale: %v", stale)
			}
			if c.err == "" {
				if err != nil {
					t.Fatalf("LoadCertificate: %v", err)
				}
				want, _ := os.ReadFile(c.file)
				if string(cert.OCSPStaple) != string(want) {
					t.Fatal("the response is not stapled")
				}
			} else if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("LoadCertificate: %v, want an error saying %q", err, c.err)
			}
			// The policy: accepted, or refused at the ocsp line.
			src := "apps:\n  - name: a\n    listen: 127.0.0.1:8443\n    tls:\n      cert: " + c.cert + "\n      key: " + pki.KeyFile + "\n      ocsp: " + c.file + "\n    backends: {static: [\"h:1\"]}\n"
			s, err := Parse("p.yaml", []byte(src))
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case c.err == "" && s.Apps[0].TLS.OCSPFile != c.file:
				t.Fatalf("OCSPFile = %q", s.Apps[0].TLS.OCSPFile)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), ":7:13: apps[0].tls.ocsp: ") || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("Parse: %v, want line 7 column 13, apps[0].tls.ocsp and %q", err, c.err)
			}
		})
	}
	// Past its nextUpdate: no error (the policy loads, the listener
	// serves), nothing stapled, and stale says why.
	expired := write("expired.der", der(pki.OCSP(ocsp.Good, nil, time.Now().Add(-time.Minute))))
	cert, stale, err := LoadCertificate(&TLS{CertFile: pki.CertFile, KeyFile: pki.KeyFile, OCSPFile: expired}, time.Now())
	if err != nil || stale == nil || !strings.Contains(stale.Error(), "expired") || cert.OCSPStaple != nil {
		t.Fatalf("expired: err %v, stale %v, staple %d bytes; want no error, stale, no staple", err, stale, len(cert.OCSPStaple))
	}
	src := "apps:\n  - name: a\n    listen: 127.0.0.1:8443\n    tls:\n      cert: " + pki.CertFile + "\n      key: " + pki.KeyFile + "\n      ocsp: " + expired + "\n    backends: {static: [\"h:1\"]}\n"
	if _, err := Parse("p.yaml", []byte(src)); err != nil {
		t.Fatalf("a policy with a stale response: %v, want it accepted", err)
	}
	// No ocsp key: nothing stapled.
	cert, stale, err = LoadCertificate(&TLS{CertFile: pki.CertFile, KeyFile: pki.KeyFile}, time.Now())
	if err != nil || stale != nil || cert.OCSPStaple != nil {
		t.Fatalf("without ocsp: %v, %v, staple %d bytes", err, stale, len(cert.OCSPStaple))
	}
}
