package policy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/crypto/ocsp"
)

// LoadCertificate loads t's certificate and key as a pair and, when t
// names an OCSP response file, staples it (tls.Certificate.OCSPStaple):
// the one loader of the policy check and of the listeners, so that what
// check accepts is what a reload installs.
//
// A response that is wrong (unreadable, for another certificate, badly
// signed, revoked, unknown) is an error: the policy is refused. One that
// is only stale (past its nextUpdate) is not stapled and comes back as
// stale, not as an error: the listener serves without a staple and the
// caller says so, because a stale file at a restart must not keep sentry
// down (a client that insists on a staple refuses a stale one anyway).
func LoadCertificate(t *TLS, now time.Time) (c tls.Certificate, stale, err error) {
	c, err = tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil || t.OCSPFile == "" {
		return c, nil, err
	}
	der, err := os.ReadFile(t.OCSPFile)
	if err == nil {
		var next time.Time
		if next, err = checkOCSP(&c, der, now); err == nil && !next.IsZero() && !now.Before(next) {
			return c, &OCSPError{File: t.OCSPFile, Err: fmt.Errorf("the response expired at %s (nextUpdate): not stapled; fetch a new one and reload", next.UTC().Format(time.RFC3339))}, nil
		}
	}
	if err != nil {
		return c, nil, &OCSPError{File: t.OCSPFile, Err: err}
	}
	c.OCSPStaple = der
	return c, nil, nil
}

// OCSPError is LoadCertificate's error (or stale report) about the OCSP
// response when the pair itself loads.
type OCSPError struct {
	File string
	Err  error
}

func (e *OCSPError) Error() string { return "OCSP response " + e.File + ": " + e.Err.Error() }
func (e *OCSPError) Unwrap() error { return e.Err }

// checkOCSP refuses a response that would do harm stapled: not a
// response, not for c's leaf, not signed by the issuer when the chain
// holds it (or by a responder certificate the issuer signed for OCSP
// signing and still valid), or not "good". It returns the response's
// nextUpdate (zero: none).
func checkOCSP(c *tls.Certificate, der []byte, now time.Time) (time.Time, error) {
	if len(c.Certificate) == 0 {
		return time.Time{}, errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return time.Time{}, err
	}
	var issuer *x509.Certificate
	if len(c.Certificate) > 1 {
		if issuer, err = x509.ParseCertificate(c.Certificate[1]); err != nil {
			return time.Time{}, err
		}
	}
	r, err := ocsp.ParseResponseForCert(der, leaf, issuer)
	if re := (ocsp.ResponseError{}); errors.As(err, &re) {
		return time.Time{}, fmt.Errorf("the responder answered %q, not a certificate status", re.Status.String())
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("not a valid OCSP response for this certificate (DER, as openssl ocsp -respout writes; signed by the certificate after the leaf in the cert file, when there is one): %w", err)
	}
	if rc := r.Certificate; rc != nil && issuer != nil {
		// A delegated responder: x/crypto checked that the issuer signed
		// it; RFC 6960 §4.2.2.2 also wants it marked for OCSP signing.
		if !slices.Contains(rc.ExtKeyUsage, x509.ExtKeyUsageOCSPSigning) {
			return time.Time{}, fmt.Errorf("signed by %q, a certificate not marked for OCSP signing", rc.Subject.CommonName)
		}
		if now.Before(rc.NotBefore) || now.After(rc.NotAfter) {
			return time.Time{}, fmt.Errorf("signed by %q, a responder certificate not valid now", rc.Subject.CommonName)
		}
	}
	switch r.Status {
	case ocsp.Good:
	case ocsp.Revoked:
		return time.Time{}, fmt.Errorf("the certificate is revoked (at %s)", r.RevokedAt.UTC().Format(time.RFC3339))
	default:
		return time.Time{}, errors.New("the response's status is unknown, not good")
	}
	return r.NextUpdate, nil
}
