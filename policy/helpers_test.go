package policy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writePair writes a fresh self-signed certificate and its key into dir as
// NAME.pem and NAME.key and returns their paths.
func writePair(t testing.TB, dir, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert = filepath.Join(dir, name+".pem")
	key = filepath.Join(dir, name+".key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// asErrors unwraps a Parse error into Errors, failing the test on any
// other type.
func asErrors(t *testing.T, err error) Errors {
	t.Helper()
	if err == nil {
		return nil
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, want policy.Errors: %v", err, err)
	}
	if len(es) == 0 {
		t.Fatalf("empty Errors returned as an error")
	}
	return es
}

// mustParse parses src (a leading newline is dropped, so line 1 is the
// first written line) and fails on any error.
func mustParse(t *testing.T, src string) *Snapshot {
	t.Helper()
	s, err := Parse("t.yaml", []byte(strings.TrimPrefix(src, "\n")))
	if err != nil {
		t.Fatalf("unexpected errors:\n%v", err)
	}
	return s
}

// matchErrors checks that es holds exactly one error per want entry, each
// written "LINE: substring", and nothing else.
func matchErrors(t *testing.T, es Errors, want []string) {
	t.Helper()
	used := make([]bool, len(es))
	for _, w := range want {
		ls, sub, ok := strings.Cut(w, ": ")
		if !ok {
			t.Fatalf("bad want %q: write LINE: substring", w)
		}
		ln, err := strconv.Atoi(ls)
		if err != nil {
			t.Fatalf("bad want %q: %v", w, err)
		}
		found := false
		for i, e := range es {
			if !used[i] && e.Line == ln && strings.Contains(e.Msg, sub) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("missing error %q", w)
		}
	}
	for i, e := range es {
		if !used[i] {
			t.Errorf("unexpected error %q", e.Error())
		}
	}
	if t.Failed() {
		t.Logf("all errors:\n%v", es)
	}
}
