package policy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/crypto/ocsp"
)

// LoadCertificate loads t's certificate and key as a pair and, when t
// names an OCSP response file, staples it (tls.Certificate.OCSPStaple):
// the one loader of the policy check and of the listeners, so that what
// check accepts is what a reload installs.
func LoadCertificate(t *TLS, now time.Time) (tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return c, err
	}
	if t.OCSPFile == "" {
		return c, nil
	}
	der, err := os.ReadFile(t.OCSPFile)
	if err == nil {
		err = checkOCSP(&c, der, now)
	}
	if err != nil {
		return c, &OCSPError{File: t.OCSPFile, Err: err}
	}
	c.OCSPStaple = der
	return c, nil
}

// OCSPError is LoadCertificate's error when the pair loads and the OCSP
// response does not.
type OCSPError struct {
	File string
	Err  error
}

func (e *OCSPError) Error() string { return "OCSP response " + e.File + ": " + e.Err.Error() }
func (e *OCSPError) Unwrap() error { return e.Err }

// checkOCSP refuses a response that would do harm stapled: not DER, not
// for c's leaf, signed by someone else than the issuer when the chain
// holds it, not "good", or past its nextUpdate (a client that requires a
// staple refuses a stale one).
func checkOCSP(c *tls.Certificate, der []byte, now time.Time) error {
	if len(c.Certificate) == 0 {
		return errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return err
	}
	var issuer *x509.Certificate
	if len(c.Certificate) > 1 {
		if issuer, err = x509.ParseCertificate(c.Certificate[1]); err != nil {
			return err
		}
	}
	r, err := ocsp.ParseResponseForCert(der, leaf, issuer)
	if err != nil {
		return fmt.Errorf("not a valid OCSP response for this certificate (DER, as openssl ocsp -respout writes): %w", err)
	}
	if r.SerialNumber == nil || r.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		return fmt.Errorf("the response is for serial %v, the certificate's is %v", r.SerialNumber, leaf.SerialNumber)
	}
	switch r.Status {
	case ocsp.Good:
	case ocsp.Revoked:
		return fmt.Errorf("the certificate is revoked (at %s)", r.RevokedAt.UTC().Format(time.RFC3339))
	default:
		return errors.New("the response's status is unknown, not good")
	}
	if !r.NextUpdate.IsZero() && !now.Before(r.NextUpdate) {
		return fmt.Errorf("the response expired at %s (nextUpdate); fetch a new one", r.NextUpdate.UTC().Format(time.RFC3339))
	}
	return nil
}
