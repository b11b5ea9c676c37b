package tls13

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"time"
)

// SelfTest checks Tap against crypto/tls itself, over loopback TCP with a
// throwaway certificate, in every handshake shape a Tap must follow (see
// the package doc): a full handshake, a resumed one (a session ticket
// from the first), one after a HelloRetryRequest, and one with a client
// certificate (crypto/tls then sends its ticket after reading the
// client's certificate, not with its own Finished). In each, Go's client
// sends data at once (so that it may arrive with its Finished: the
// leftover path), the server's state is taken and a Conn carries on over
// it; the client reads a reply (the write secret and sequence number),
// the server asks for a KeyUpdate and Go's client answers with its own
// (both key updates), and a second exchange and a close_notify go
// through.
//
// The suite is the one Go negotiates (AES-128-GCM with AES hardware): Go
// cannot be made to pick another TLS 1.3 suite, and the path is the same
// for all; the tests cover the other suites against OpenSSL. Every
// connection a Tap hands over is checked on its own too (Take opens the
// records crypto/tls wrote); a failure here means this Go build's
// crypto/tls does something the Tap does not follow, and the caller then
// keeps every connection on crypto/tls.
func SelfTest() error {
	selfOnce.Do(func() { selfErr = selfTest() })
	return selfErr
}

var (
	selfOnce sync.Once
	selfErr  error
)

// selfVariant is one handshake shape of the self-test.
type selfVariant struct {
	name string
	// srv and cli adjust the two sides' configurations.
	srv, cli func(s, c *tls.Config)
	// resumed: the handshake must resume a session (a second connection
	// with the first one's client configuration); hrr: it must have
	// taken a HelloRetryRequest; peerCert: the client must have sent a
	// certificate. tickets: crypto/tls must have written a session
	// ticket under the application key (the write sequence number is not
	// 0).
	resumed, hrr, peerCert, tickets bool
}

func selfTest() error {
	cert, err := throwawayCert()
	if err != nil {
		return err
	}
	clientCert, err := throwawayCert()
	if err != nil {
		return err
	}
	cache := tls.NewLRUClientSessionCache(4)
	variants := []selfVariant{
		{name: "no ticket"},
		{name: "full", cli: func(_, c *tls.Config) { c.ClientSessionCache = cache }, tickets: true},
		{name: "resumed", cli: func(_, c *tls.Config) { c.ClientSessionCache = cache }, resumed: true, tickets: true},
		// Go's client sends a key share for the first group in Go's own
		// order (X25519 before P-256), which this server does not take.
		{name: "hello retry", srv: func(s, _ *tls.Config) { s.CurvePreferences = []tls.CurveID{tls.CurveP256} },
			cli: func(_, c *tls.Config) {
				c.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
				c.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			}, hrr: true, tickets: true},
		{name: "client certificate",
			srv: func(s, _ *tls.Config) { s.ClientAuth = tls.RequireAnyClientCert },
			cli: func(_, c *tls.Config) {
				c.Certificates = []tls.Certificate{clientCert}
				c.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			}, peerCert: true, tickets: true},
	}
	// One server configuration for all but its own changes, as a
	// listener has: the session ticket keys carry over.
	plain := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	shared := TapConfig(plain)
	for _, v := range variants {
		s := shared
		if v.srv != nil {
			s = plain.Clone()
			v.srv(s, nil)
			s = TapConfig(s)
		}
		// One ServerName: the session cache is keyed by it (else by the
		// address, a new port each time).
		c := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, ServerName: "selftest"}
		if v.cli != nil {
			v.cli(nil, c)
		}
		if err := selfTestConn(s, c, v); err != nil {
			return fmt.Errorf("tls13 self-test (%s): %w", v.name, err)
		}
	}
	return nil
}

func selfTestConn(scfg, ccfg *tls.Config, v selfVariant) error {
	// Loopback TCP, not net.Pipe: a KeyUpdate makes both sides write at
	// once, which an unbuffered pipe deadlocks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	cn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer cn.Close()
	sn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer sn.Close()
	deadline := time.Now().Add(10 * time.Second)
	_ = cn.SetDeadline(deadline)
	_ = sn.SetDeadline(deadline)
	tap := NewTap(sn, true)
	srv := tls.Server(tap, scfg)
	cli := tls.Client(cn, ccfg)
	errc := make(chan error, 1)
	go func() { errc <- clientSide(cli) }()
	if err := srv.Handshake(); err != nil {
		return err
	}
	cs := srv.ConnectionState()
	if cs.DidResume != v.resumed || cs.HelloRetryRequest != v.hrr || (len(cs.PeerCertificates) > 0) != v.peerCert {
		return fmt.Errorf("handshake: resumed %v, hello retry %v, client certificate %v",
			cs.DidResume, cs.HelloRetryRequest, len(cs.PeerCertificates) > 0)
	}
	sec, raw, err := tap.Take(srv)
	if err != nil {
		return err
	}
	if (sec.WriteSeq > 0) != v.tickets {
		return fmt.Errorf("%d records written under the application key", sec.WriteSeq)
	}
	st, err := New(sec, raw)
	if err != nil {
		return err
	}
	c := NewConn(sn, st, srv.ConnectionState(), nil)
	buf := make([]byte, 64)
	if err := expect(c, buf, "ping 1"); err != nil {
		return err
	}
	st.RequestKeyUpdate()
	if _, err := c.Write([]byte("pong 1")); err != nil {
		return err
	}
	if err := expect(c, buf, "ping 2"); err != nil {
		return err
	}
	if _, err := c.Write([]byte("pong 2")); err != nil {
		return err
	}
	if bytes.Equal(st.in.secret, sec.ReadSecret) {
		return errors.New("client key update not seen")
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	if _, err := c.Read(buf); err != io.EOF {
		return fmt.Errorf("close_notify: %v", err)
	}
	return <-errc
}

func clientSide(cli *tls.Conn) error {
	defer cli.Close()
	if err := cli.Handshake(); err != nil {
		return err
	}
	if _, err := cli.Write([]byte("ping 1")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	if err := expect(cli, buf, "pong 1"); err != nil {
		return err
	}
	// The server's KeyUpdate came before pong 1: crypto/tls answered it
	// with its own and writes under its next key from now on.
	if _, err := cli.Write([]byte("ping 2")); err != nil {
		return err
	}
	if err := expect(cli, buf, "pong 2"); err != nil {
		return err
	}
	if err := cli.CloseWrite(); err != nil {
		return err
	}
	if _, err := cli.Read(buf); err != io.EOF {
		return fmt.Errorf("client: close_notify: %v", err)
	}
	return nil
}

func expect(r io.Reader, buf []byte, want string) error {
	n, err := io.ReadAtLeast(r, buf, len(want))
	if err != nil {
		return err
	}
	if string(buf[:n]) != want {
		return fmt.Errorf("read %q, want %q", buf[:n], want)
	}
	return nil
}

// throwawayCert is a self-signed P-256 certificate for the self-test.
func throwawayCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tls13-selftest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"selftest"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
