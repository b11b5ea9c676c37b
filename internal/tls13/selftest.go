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

// SelfTest checks Extract against crypto/tls itself, over an in-memory
// connection, with a throwaway certificate: Go's client
// and server shake hands, the client sends data at once (so that the
// server's crypto/tls may read it with the Finished: the leftover path),
// the server's state is extracted and a Conn carries on over it; the
// client reads a reply (the write secret and sequence number), the server
// asks for a KeyUpdate and Go's client answers with its own (both key
// updates), and a second exchange and a close_notify go through.
//
// The suite is the one Go negotiates (AES-128-GCM with AES hardware):
// Go cannot be made to pick another TLS 1.3 suite, and the fields read
// are the same for all; the tests cover the other suites against
// OpenSSL. Any failure means Extract's reading of crypto/tls is wrong for this Go
// build; the caller then keeps every connection on crypto/tls.
func SelfTest() error {
	selfOnce.Do(func() { selfErr = selfTest() })
	return selfErr
}

var (
	selfOnce sync.Once
	selfErr  error
)

func selfTest() error {
	cert, err := throwawayCert()
	if err != nil {
		return err
	}
	if err := selfTestConn(cert); err != nil {
		return fmt.Errorf("tls13 self-test: %w", err)
	}
	return nil
}

func selfTestConn(cert tls.Certificate) error {
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
	srv := tls.Server(sn, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	cli := tls.Client(cn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	errc := make(chan error, 1)
	go func() { errc <- clientSide(cli) }()
	if err := srv.Handshake(); err != nil {
		return err
	}
	sec, raw, err := Extract(srv)
	if err != nil {
		return err
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
