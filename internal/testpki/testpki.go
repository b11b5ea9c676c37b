// Package testpki makes certificates and OCSP responses for tests: a CA,
// a leaf for 127.0.0.1 that it signs, and OCSP responses about the leaf.
// Test support only; nothing in sentry's binary imports it.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ocsp"
)

// PKI is a CA and one leaf it signed, written as files.
type PKI struct {
	CA, Leaf     *x509.Certificate
	caKey        crypto.Signer
	CertFile     string // the leaf, then the CA (the chain)
	LeafOnlyFile string // the leaf alone
	KeyFile      string // the leaf's key
}

// Options shape the certificates NewWith writes.
type Options struct {
	// Validity is how long the CA and the leaf stay valid from now
	// (both start an hour ago). Zero: 24 hours.
	Validity time.Duration
	// CRL, if set, is the leaf's CRL distribution point, as a public CA
	// writes one (scanners such as testssl.sh rate a leaf with neither a
	// CRL nor an OCSP URI). Nothing serves it.
	CRL string
}

// New writes a CA and a leaf into dir, valid for 24 hours.
func New(dir string) (*PKI, error) { return NewWith(dir, Options{}) }

// NewWith is New shaped by o.
func NewWith(dir string, o Options) (*PKI, error) {
	if o.Validity == 0 {
		o.Validity = 24 * time.Hour
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caT := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(o.Validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	lT := &x509.Certificate{
		SerialNumber: big.NewInt(4242),
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(o.Validity),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if o.CRL != "" {
		lT.CRLDistributionPoints = []string{o.CRL}
	}
	lDER, err := x509.CreateCertificate(rand.Reader, lT, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(lDER)
	if err != nil {
		return nil, err
	}
	p := &PKI{CA: ca, Leaf: leaf, caKey: caKey,
		CertFile:     filepath.Join(dir, "chain.pem"),
		LeafOnlyFile: filepath.Join(dir, "leaf.pem"),
		KeyFile:      filepath.Join(dir, "leaf.key"),
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: lDER})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	for f, b := range map[string][]byte{
		p.CertFile:     append(append([]byte{}, leafPEM...), caPEM...),
		p.LeafOnlyFile: leafPEM,
		p.KeyFile:      pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// OCSP is a DER OCSP response about the leaf, signed by the CA: status
// (ocsp.Good, ocsp.Revoked, ocsp.Unknown), serial (nil: the leaf's), and
// nextUpdate at next (zero: none).
func (p *PKI) OCSP(status int, serial *big.Int, next time.Time) ([]byte, error) {
	return p.ocsp(p.caKey, status, serial, next)
}

// OCSPSignedBy is OCSP signed by another key than the CA's.
func (p *PKI) OCSPSignedBy(k crypto.Signer) ([]byte, error) {
	return p.ocsp(k, ocsp.Good, nil, time.Time{})
}

func (p *PKI) ocsp(k crypto.Signer, status int, serial *big.Int, next time.Time) ([]byte, error) {
	if serial == nil {
		serial = p.Leaf.SerialNumber
	}
	now := time.Now()
	tmpl := ocsp.Response{
		Status:       status,
		SerialNumber: serial,
		ThisUpdate:   now.Add(-time.Minute),
		NextUpdate:   next,
	}
	if status == ocsp.Revoked {
		tmpl.RevokedAt = now.Add(-time.Hour)
	}
	return ocsp.CreateResponse(p.CA, p.CA, tmpl, k)
}

// OCSPDelegated is a good response signed by a responder certificate the
// CA issued (embedded in the response), marked for OCSP signing or not.
func (p *PKI) OCSPDelegated(ocspSigning bool) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	t := &x509.Certificate{
		SerialNumber: big.NewInt(99),
		Subject:      pkix.Name{CommonName: "responder"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if ocspSigning {
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageOCSPSigning}
	}
	der, err := x509.CreateCertificate(rand.Reader, t, p.CA, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, err
	}
	rc, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return ocsp.CreateResponse(p.CA, rc, ocsp.Response{
		Status:       ocsp.Good,
		SerialNumber: p.Leaf.SerialNumber,
		ThisUpdate:   now.Add(-time.Minute),
		Certificate:  rc,
	}, key)
}
