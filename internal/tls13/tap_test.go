package tls13

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tapPair makes a handshake between Go's client (ccfg) and a server over
// a Tap (scfg, through TapConfig unless raw is set), the client sending
// first after the handshake (first, if not empty); it returns the
// server's connection and its Tap.
func tapPair(t *testing.T, scfg, ccfg *tls.Config, first string, raw bool) (*tls.Conn, *Tap) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		cli := tls.Client(c, ccfg)
		if cli.Handshake() != nil {
			return
		}
		if first != "" {
			io.WriteString(cli, first)
		}
		io.Copy(io.Discard, cli)
	}()
	sn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Close() })
	sn.SetDeadline(time.Now().Add(10 * time.Second))
	tap := NewTap(sn, true)
	if !raw {
		scfg = TapConfig(scfg)
	}
	srv := tls.Server(tap, scfg)
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	return srv, tap
}

func serverConfig(t *testing.T) *tls.Config {
	t.Helper()
	cert, err := throwawayCert()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}

// TestTapWriteSeq: the write sequence number is the records crypto/tls
// wrote under the application key: one session ticket for a client that
// keeps sessions, none for one that does not (it offers no PSK mode).
func TestTapWriteSeq(t *testing.T) {
	for _, tc := range []struct {
		cache bool
		want  uint64
	}{{false, 0}, {true, 1}} {
		ccfg := &tls.Config{InsecureSkipVerify: true}
		if tc.cache {
			ccfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
		}
		srv, tap := tapPair(t, serverConfig(t), ccfg, "", false)
		sec, _, err := tap.Take(srv)
		if err != nil {
			t.Fatal(err)
		}
		if sec.WriteSeq != tc.want || sec.ReadSeq != 0 {
			t.Errorf("cache %v: write seq %d read seq %d, want %d and 0", tc.cache, sec.WriteSeq, sec.ReadSeq, tc.want)
		}
	}
}

// TestTapRefuses: Take refuses whatever it cannot prove, and the
// connection goes on with crypto/tls.
func TestTapRefuses(t *testing.T) {
	cli := &tls.Config{InsecureSkipVerify: true}
	t.Run("TLS 1.2", func(t *testing.T) {
		srv, tap := tapPair(t, serverConfig(t), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}, "", false)
		if _, _, err := tap.Take(srv); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("took a TLS 1.2 connection: %v", err)
		}
	})
	t.Run("no key log", func(t *testing.T) {
		srv, tap := tapPair(t, serverConfig(t), cli, "", true)
		if _, _, err := tap.Take(srv); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("took a connection without secrets: %v", err)
		}
	})
	t.Run("read past the handshake", func(t *testing.T) {
		srv, tap := tapPair(t, serverConfig(t), cli, "request", false)
		buf := make([]byte, 16)
		if n, err := srv.Read(buf); err != nil || string(buf[:n]) != "request" {
			t.Fatalf("%q %v", buf[:n], err)
		}
		if _, _, err := tap.Take(srv); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("took a connection crypto/tls had read application data on: %v", err)
		}
	})
	t.Run("released", func(t *testing.T) {
		srv, tap := tapPair(t, serverConfig(t), cli, "request", false)
		tap.Release()
		if _, _, err := tap.Take(srv); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("took a released connection: %v", err)
		}
		// crypto/tls carries on over the released Tap.
		buf := make([]byte, 16)
		if n, err := srv.Read(buf); err != nil || string(buf[:n]) != "request" {
			t.Fatalf("%q %v", buf[:n], err)
		}
	})
}

// TestTapPassesRecordsOneAtATime: crypto/tls is never given a byte past
// the record it reads, however the socket delivers them.
func TestTapPassesRecordsOneAtATime(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tap := NewTap(b, true)
	recs := []byte{22, 3, 1, 0, 2, 'h', 'i', 23, 3, 3, 0, 3, 'a', 'b', 'c', 21, 3, 3, 0, 0}
	go a.Write(recs)
	var got [][]byte
	for range 3 {
		buf := make([]byte, 64)
		total := 0
		for {
			n, err := tap.Read(buf[total:])
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if total >= 5 && total == 5+(int(buf[3])<<8|int(buf[4])) {
				break
			}
			if total >= 5 && total > 5+(int(buf[3])<<8|int(buf[4])) {
				t.Fatalf("read past a record: %q", buf[:total])
			}
		}
		got = append(got, buf[:total])
	}
	if string(got[1]) != string(recs[7:15]) || string(tap.inRecs) != string(recs[7:15]) {
		t.Fatalf("records %q, kept %q", got, tap.inRecs)
	}
}
