package tls13

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSelfTest: the Tap follows this Go's crypto/tls in every handshake
// shape (full, resumed, HelloRetryRequest, client certificate): data both
// ways, a KeyUpdate each way, close_notify.
func TestSelfTest(t *testing.T) {
	if err := selfTest(); err != nil {
		t.Fatal(err)
	}
}

// TestExpandLabel checks the key schedule against RFC 8448 §3 (simple
// 1-RTT handshake): the server's handshake traffic secret gives the
// write key and IV listed there.
func TestExpandLabel(t *testing.T) {
	secret, _ := hex.DecodeString("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38")
	s := suiteOf(tls.TLS_AES_128_GCM_SHA256)
	if got := hex.EncodeToString(s.expandLabel(secret, "key", 16)); got != "3fce516009c21727d0f2e4e86ee403bc" {
		t.Errorf("key %s", got)
	}
	if got := hex.EncodeToString(s.expandLabel(secret, "iv", 12)); got != "5d313eb2671276ee13000b30" {
		t.Errorf("iv %s", got)
	}
}

// pair makes a client/server pair of States (the client's write secret
// is the server's read secret).
func pair(t testing.TB, suite uint16) (cli, srv *State) {
	t.Helper()
	a, b := bytes.Repeat([]byte{1}, 48), bytes.Repeat([]byte{2}, 48)
	if suite != tls.TLS_AES_256_GCM_SHA384 {
		a, b = a[:32], b[:32]
	}
	var err error
	if cli, err = New(Secrets{Suite: suite, ReadSecret: b, WriteSecret: a}, nil); err != nil {
		t.Fatal(err)
	}
	if srv, err = New(Secrets{Suite: suite, ReadSecret: a, WriteSecret: b, WriteSeq: 1}, nil); err != nil {
		t.Fatal(err)
	}
	cli.in.seq = 1
	return cli, srv
}

// deliver moves wire into st and reads all the plaintext out.
func deliver(t testing.TB, st *State, wire []byte) ([]byte, error) {
	var out []byte
	buf := make([]byte, 5000)
	for {
		n, err := st.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
		if n > 0 {
			continue
		}
		if len(wire) == 0 {
			return out, nil
		}
		sp := st.RawSpace()
		m := copy(sp, wire)
		st.Filled(m)
		wire = wire[m:]
	}
}

// TestSealOpenSuites: every suite round-trips, records split at 2^14,
// key updates both ways, close_notify is io.EOF.
func TestSealOpenSuites(t *testing.T) {
	for _, id := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256} {
		cli, srv := pair(t, id)
		big := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80,000 bytes: 5 records
		wire := srv.Seal(nil, big)
		if n := countRecords(wire); n != 5 {
			t.Errorf("%#x: %d records, want 5", id, n)
		}
		got, err := deliver(t, cli, wire)
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("%#x: %d bytes, %v", id, len(got), err)
		}
		// The client asks for a key update; the server's next Seal
		// sends its own first.
		cli.RequestKeyUpdate()
		got, err = deliver(t, srv, cli.Seal(nil, []byte("after update")))
		if err != nil || string(got) != "after update" || !srv.WriteDue() {
			t.Fatalf("%#x: %q %v due=%v", id, got, err, srv.WriteDue())
		}
		got, err = deliver(t, cli, srv.Seal(nil, []byte("reply")))
		if err != nil || string(got) != "reply" || srv.WriteDue() {
			t.Fatalf("%#x: %q %v", id, got, err)
		}
		if _, err := deliver(t, srv, cli.CloseNotify(nil)); err != io.EOF {
			t.Fatalf("%#x: close_notify: %v", id, err)
		}
	}
}

func countRecords(w []byte) int {
	n := 0
	for len(w) >= 5 {
		l := int(w[3])<<8 | int(w[4])
		w = w[5+l:]
		n++
	}
	return n
}

// alertIn opens the one record in wire with cli (the server's peer) and
// returns the alert it carries (-1: none).
func alertIn(t *testing.T, cli *State, wire []byte) int {
	t.Helper()
	if len(wire) == 0 {
		return -1
	}
	n := headerLen + (int(wire[3])<<8 | int(wire[4]))
	if len(wire) != n {
		t.Fatalf("%d bytes sent, want one record", len(wire))
	}
	pt, err := cli.in.aead.Open(nil, cli.in.nonceFor(), wire[headerLen:], wire[:headerLen])
	if err != nil {
		t.Fatalf("the alert does not open under the write key: %v", err)
	}
	if len(pt) != 3 || pt[2] != typeAlert || pt[0] != alertLevelFatal {
		t.Fatalf("not a fatal alert: %x", pt)
	}
	return int(pt[1])
}

// TestOpenRefuses: what a record layer must refuse, each with its alert
// (RFC 8446 §6.2), sealed under the current write key.
func TestOpenRefuses(t *testing.T) {
	keyUpdate := func(req byte) []byte { return []byte{hsKeyUpdate, 0, 0, 1, req} }
	cases := []struct {
		name  string
		mk    func(cli *State) []byte
		alert int
	}{
		{"tampered", func(cli *State) []byte { w := cli.Seal(nil, []byte("x")); w[7] ^= 1; return w }, alertBadRecordMAC},
		{"too short to authenticate", func(*State) []byte { return []byte{typeApplicationData, 3, 3, 0, 15} }, alertBadRecordMAC},
		{"plain", func(*State) []byte { return []byte{typeHandshake, 3, 3, 0, 1, 0} }, alertUnexpectedMessage},
		{"ccs", func(*State) []byte { return []byte{typeChangeCipherSpec, 3, 3, 0, 1, 1} }, alertUnexpectedMessage},
		{"record version", func(*State) []byte { return []byte{typeApplicationData, 3, 1, 0, 20} }, alertProtocolVersion},
		{"overflow", func(*State) []byte { return []byte{typeApplicationData, 3, 3, 0x41, 0x01} }, alertRecordOverflow},
		{"ticket", func(cli *State) []byte {
			return cli.sealRecord(nil, []byte{hsNewSessionTicket, 0, 0, 1, 0}, typeHandshake)
		}, alertUnexpectedMessage},
		{"key update, long", func(cli *State) []byte {
			return cli.sealRecord(nil, []byte{hsKeyUpdate, 0, 0, 2, 0, 0}, typeHandshake)
		}, alertDecodeError},
		{"key update, bad request", func(cli *State) []byte { return cli.sealRecord(nil, keyUpdate(2), typeHandshake) }, alertIllegalParameter},
		{"key update, not at the record's end", func(cli *State) []byte {
			return cli.sealRecord(nil, append(keyUpdate(0), keyUpdate(0)...), typeHandshake)
		}, alertUnexpectedMessage},
		{"handshake fragment, then data", func(cli *State) []byte {
			w := cli.sealRecord(nil, keyUpdate(0)[:2], typeHandshake)
			return cli.Seal(w, []byte("x"))
		}, alertUnexpectedMessage},
		{"alert, long", func(cli *State) []byte { return cli.sealRecord(nil, []byte{2, 40, 0}, typeAlert) }, alertDecodeError},
		{"peer's alert", func(cli *State) []byte { return cli.sealRecord(nil, []byte{2, 40}, typeAlert) }, -1},
		{"big plaintext", func(cli *State) []byte {
			return cli.sealRecord(nil, make([]byte, MaxPlaintext+1), typeApplicationData)
		}, alertRecordOverflow},
		// §5.4: the whole TLSInnerPlaintext (content, type, padding)
		// is at most 2^14+1 bytes, padding included.
		{"padded past the limit", func(cli *State) []byte {
			inner := append(make([]byte, MaxPlaintext), typeApplicationData)
			inner = append(inner, make([]byte, 100)...)
			return cli.sealRecord(nil, inner, 0) // 0: one more byte of padding
		}, alertRecordOverflow},
		// §5.1: no zero-length handshake fragments, padded or not.
		{"empty handshake", func(cli *State) []byte { return cli.sealRecord(nil, nil, typeHandshake) }, alertUnexpectedMessage},
		{"padded empty handshake", func(cli *State) []byte {
			return cli.sealRecord(nil, []byte{typeHandshake, 0, 0}, 0)
		}, alertUnexpectedMessage},
		{"all padding", func(cli *State) []byte { return cli.sealRecord(nil, nil, 0) }, alertUnexpectedMessage},
		{"tag only", func(cli *State) []byte {
			w := []byte{typeApplicationData, 3, 3, 0, tagLen}
			return cli.out.aead.Seal(w, cli.out.nonceFor(), nil, w)
		}, alertUnexpectedMessage},
	}
	for _, tc := range cases {
		cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
		_, err := deliver(t, srv, tc.mk(cli))
		if err == nil || err == io.EOF {
			t.Errorf("%s: err %v", tc.name, err)
			continue
		}
		// Sticky: the next read fails too.
		if _, err2 := srv.Read(make([]byte, 10)); err2 == nil {
			t.Errorf("%s: not sticky", tc.name)
		}
		if got := alertIn(t, cli, srv.Alert(nil)); got != tc.alert {
			t.Errorf("%s (%v): alert %d, want %d", tc.name, err, got, tc.alert)
		}
		// Nothing is sealed after the alert.
		if w := srv.Seal(nil, []byte("late")); len(w) != 0 {
			t.Errorf("%s: sealed after the alert", tc.name)
		}
	}
}

// TestUselessRecords: records without application data are bounded in a
// row (MaxUseless), empty ones and KeyUpdates alike; data resets the
// count.
func TestUselessRecords(t *testing.T) {
	keyUpdate := []byte{hsKeyUpdate, 0, 0, 1, 1}
	useless := func(cli *State, w []byte, i int) []byte {
		if i%3 == 1 {
			w = cli.sealRecord(w, keyUpdate, typeHandshake)
			_ = cli.out.next(cli.s)
			return w
		}
		return cli.SealEmpty(w)
	}
	cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
	var w []byte
	for round := 0; round < 3; round++ {
		for i := 0; i < MaxUseless; i++ {
			w = useless(cli, w, i)
		}
		w = cli.Seal(w, []byte("data"))
	}
	got, err := deliver(t, srv, w)
	if err != nil || string(got) != "datadatadata" {
		t.Fatalf("%d in a row between data: %q %v", MaxUseless, got, err)
	}
	w = nil
	for i := 0; i <= MaxUseless; i++ {
		w = useless(cli, w, i)
	}
	w = cli.Seal(w, []byte("late"))
	if got, err := deliver(t, srv, w); err != ErrUseless || len(got) != 0 {
		t.Fatalf("%d in a row: %q %v, want %v", MaxUseless+1, got, err, ErrUseless)
	}
	if a := alertIn(t, cli, srv.Alert(nil)); a != alertUnexpectedMessage {
		t.Fatalf("alert %d", a)
	}
}

// TestKeyUpdateFragments: a KeyUpdate split over records (§5.1 allows
// any handshake message to be) is put together and applied.
func TestKeyUpdateFragments(t *testing.T) {
	for split := 1; split < 5; split++ {
		cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
		m := []byte{hsKeyUpdate, 0, 0, 1, 0}
		w := cli.sealRecord(nil, m[:split], typeHandshake)
		w = cli.sealRecord(w, m[split:], typeHandshake)
		_ = cli.out.next(cli.s)
		w = cli.Seal(w, []byte("after"))
		got, err := deliver(t, srv, w)
		if err != nil || string(got) != "after" {
			t.Errorf("split at %d: %q %v", split, got, err)
		}
	}
}

// TestPartialRecords: a record arriving a byte at a time opens once whole.
func TestPartialRecords(t *testing.T) {
	cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
	wire := cli.Seal(nil, []byte("hello"))
	wire = cli.Seal(wire, []byte(" world"))
	var got []byte
	buf := make([]byte, 3)
	for _, b := range wire {
		sp := srv.RawSpace()
		for len(sp) == 0 { // plaintext pending: read it out
			n, _ := srv.Read(buf)
			got = append(got, buf[:n]...)
			sp = srv.RawSpace()
		}
		sp[0] = b
		srv.Filled(1)
		for {
			n, err := srv.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			got = append(got, buf[:n]...)
		}
	}
	if string(got) != "hello world" {
		t.Fatalf("%q", got)
	}
}

// FuzzOpen: whatever the peer sends, Read returns or fails, never
// panics, and never returns more than was sent.
func FuzzOpen(f *testing.F) {
	cli, _ := pair(f, tls.TLS_AES_128_GCM_SHA256)
	f.Add(cli.Seal(nil, []byte("GET / HTTP/1.1\r\n\r\n")))
	f.Add([]byte{23, 3, 3, 0, 17, 1, 2, 3})
	f.Add([]byte{23, 3, 3, 0xff, 0xff})
	// Each kind of record the peer may send, sealed with the keys the
	// fuzz target opens with (a mutation of the ciphertext fails to
	// authenticate; FuzzInner mutates what is inside).
	f.Add(cli.SealEmpty(nil))
	f.Add(cli.sealRecord(nil, []byte{hsKeyUpdate, 0, 0, 1, 1}, typeHandshake))
	f.Add(cli.sealRecord(nil, []byte{1, alertCloseNotify}, typeAlert))
	f.Add(cli.sealRecord(nil, []byte{'x', typeApplicationData, 0, 0, 0}, 0))
	f.Add(append(cli.Seal(nil, []byte("a")), cli.Seal(nil, []byte("b"))[:9]...))
	f.Fuzz(func(t *testing.T, wire []byte) {
		_, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
		got, _ := deliver(t, srv, wire)
		if len(got) > len(wire) {
			t.Fatalf("%d plaintext bytes from %d", len(got), len(wire))
		}
	})
	_ = cli
}

// TestOpenSSLClient: OpenSSL's s_client, with each TLS 1.3 suite in
// turn, talks to a Conn over a state extracted from Go's server; its "K"
// command sends a KeyUpdate asking for ours.
func TestOpenSSLClient(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	cert, err := throwawayCert()
	if err != nil {
		t.Fatal(err)
	}
	for _, suite := range []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
		t.Run(suite, func(t *testing.T) { openSSLSuite(t, cert, suite) })
	}
}

func openSSLSuite(t *testing.T, cert tls.Certificate, suite string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command("openssl", "s_client", "-quiet", "-no_ign_eof", "-tls1_3", "-ciphersuites", suite, "-connect", ln.Addr().String())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	tap := NewTap(raw, true)
	srv := tls.Server(tap, TapConfig(&tls.Config{Certificates: []tls.Certificate{cert}}))
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := tls.CipherSuiteName(srv.ConnectionState().CipherSuite); got != suite {
		t.Fatalf("negotiated %s", got)
	}
	sec, rest, err := tap.Take(srv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := New(sec, rest)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(raw, st, srv.ConnectionState(), nil)
	out := bufio.NewReader(stdout)
	in := bufio.NewReader(c)
	line := func(want string) {
		t.Helper()
		got, err := in.ReadString('\n')
		if err != nil || strings.TrimSpace(got) != want {
			t.Fatalf("server read %q, %v; want %q", got, err, want)
		}
	}
	io.WriteString(stdin, "one\n")
	line("one")
	if _, err := c.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := out.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("client read %q %v", got, err)
	}
	// K: the client's KeyUpdate with update_requested.
	io.WriteString(stdin, "K\n")
	// s_client takes a whole stdin read as the command when it starts
	// with K: the next line must come in a read of its own. (No state
	// of s_client's tells when it has read the K; the pause is not a
	// timing assertion.)
	time.Sleep(300 * time.Millisecond)
	io.WriteString(stdin, "three\n")
	line("three")
	if bytes.Equal(st.in.secret, sec.ReadSecret) || bytes.Equal(st.out.secret, sec.WriteSecret) {
		t.Fatal("key update not applied both ways")
	}
	if _, err := c.Write([]byte("four\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := out.ReadString('\n'); err != nil || got != "four\n" {
		t.Fatalf("client read %q %v", got, err)
	}
}

// CoalescingConn holds a client's writes after its first (the
// ClientHello) and sends them with the first write after Release, in one
// write(2): the client's Finished and its first request arrive together,
// so the server's crypto/tls reads the request with the Finished.
type CoalescingConn struct {
	net.Conn
	n        int
	held     []byte
	released bool
}

func (c *CoalescingConn) Release() { c.released = true }

func (c *CoalescingConn) Write(p []byte) (int, error) {
	c.n++
	if c.n == 1 {
		return c.Conn.Write(p)
	}
	if !c.released {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	if c.held != nil {
		b := append(c.held, p...)
		c.held = nil
		if _, err := c.Conn.Write(b); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// TestTapLeftover: what the Tap read past the Finished (the client's
// first record, in the same segment) is handed over and opened first.
func TestTapLeftover(t *testing.T) {
	cert, err := throwawayCert()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer raw.Close()
		cc := &CoalescingConn{Conn: raw}
		cli := tls.Client(cc, &tls.Config{InsecureSkipVerify: true})
		if cli.Handshake() != nil {
			return
		}
		cc.Release()
		cli.Write([]byte("early request"))
		io.Copy(io.Discard, cli)
	}()
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	tap := NewTap(raw, true)
	srv := tls.Server(tap, TapConfig(&tls.Config{Certificates: []tls.Certificate{cert}}))
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	sec, rest, err := tap.Take(srv)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) == 0 {
		t.Fatal("the Tap read nothing past the Finished")
	}
	st, err := New(sec, rest)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := st.Read(buf)
	if err != nil || string(buf[:n]) != "early request" {
		t.Fatalf("%q %v", buf[:n], err)
	}
}

// TestBufferLending: an idle state gives up its ciphertext buffer, not
// one holding a partial record, and works again with a buffer given back.
func TestBufferLending(t *testing.T) {
	cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
	if got, err := deliver(t, srv, cli.Seal(nil, []byte("one"))); err != nil || string(got) != "one" {
		t.Fatalf("%q %v", got, err)
	}
	b := srv.TakeBuffer()
	if len(b) != MaxRecord {
		t.Fatalf("idle: took %d bytes", len(b))
	}
	w := cli.Seal(nil, []byte("two"))
	if !srv.GiveBuffer(b) {
		t.Fatal("GiveBuffer refused")
	}
	srv.Filled(copy(srv.RawSpace(), w[:4]))
	if srv.TakeBuffer() != nil {
		t.Fatal("took a buffer holding a partial record")
	}
	if got, err := deliver(t, srv, w[4:]); err != nil || string(got) != "two" {
		t.Fatalf("%q %v", got, err)
	}
}

// TestOwnKeyUpdate: after 2^24 records under one key the sealer updates
// it on its own (RFC 8446 §5.5), without asking the peer to; the peer
// follows.
func TestOwnKeyUpdate(t *testing.T) {
	cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
	srv.out.seq, cli.in.seq = keyUpdateAfter, keyUpdateAfter
	old := append([]byte(nil), srv.out.secret...)
	got, err := deliver(t, cli, srv.Seal(nil, []byte("x")))
	if err != nil || string(got) != "x" {
		t.Fatalf("%q %v", got, err)
	}
	if bytes.Equal(srv.out.secret, old) || srv.out.seq != 1 || !bytes.Equal(cli.in.secret, srv.out.secret) {
		t.Fatal("no key update")
	}
	if cli.WriteDue() {
		t.Error("the update asked the peer for one")
	}
}

// TestWriteAfterCloseNotify: once Conn has sent close_notify (CloseWrite)
// nothing more can be sealed, so Write must fail, as crypto/tls's does,
// not report the bytes written and drop them.
func TestWriteAfterCloseNotify(t *testing.T) {
	_, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, b)
	c := NewConn(a, srv, tls.ConnectionState{}, nil)
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Write([]byte("lost")); err == nil {
		t.Fatalf("Write after close_notify: %d, nil", n)
	}
}

// FuzzInner: whatever a record's inner plaintext (content, content type,
// padding) holds, sealed with the peer's key, Read returns or fails,
// never panics, and returns only the content of an application_data
// record.
func FuzzInner(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n\x17"))
	f.Add([]byte{hsKeyUpdate, 0, 0, 1, 0, typeHandshake})
	f.Add([]byte{hsKeyUpdate, 0, 0, 1, 1, typeHandshake, 0, 0})
	f.Add([]byte{hsKeyUpdate, 0, 0, 1, 0, hsKeyUpdate, 0, 0, 1, 0, typeHandshake})
	f.Add([]byte{hsNewSessionTicket, 0, 0, 0, typeHandshake})
	f.Add([]byte{1, alertCloseNotify, typeAlert})
	f.Add([]byte{1, 90, typeAlert, 0})
	f.Add([]byte{1, typeChangeCipherSpec})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{typeApplicationData})
	f.Fuzz(func(t *testing.T, inner []byte) {
		if len(inner) == 0 || len(inner) > MaxPlaintext+2 {
			return
		}
		cli, srv := pair(t, tls.TLS_AES_128_GCM_SHA256)
		wire := cli.sealRecord(nil, inner[:len(inner)-1], inner[len(inner)-1])
		got, err := deliver(t, srv, wire)
		i := len(inner) - 1
		for i >= 0 && inner[i] == 0 {
			i--
		}
		if len(got) > 0 && (i < 0 || inner[i] != typeApplicationData || !bytes.Equal(got, inner[:i])) {
			t.Fatalf("read %q from inner plaintext %q", got, inner)
		}
		if err == nil && i >= 0 && inner[i] == typeApplicationData && !bytes.Equal(got, inner[:i]) {
			t.Fatalf("read %q, want %q", got, inner[:i])
		}
	})
}
