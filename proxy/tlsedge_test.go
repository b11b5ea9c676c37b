//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sentry-proxy/sentry/internal/tls13"
	"github.com/sentry-proxy/sentry/policy"
)

// tlsedge_test.go: TLS edges over real sockets -- records split and
// coalesced at the loop's buffer boundaries, floods of records without
// data, the alerts a failing connection gets.

// batchConn holds what is written to it while batching, and sends it in
// one write(2) on flush: records a client seals one by one reach the
// server in one segment, read by one read(2).
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	batching bool
	buf      []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.batching {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	return b.Conn.Write(p)
}

func (b *batchConn) batch() {
	b.mu.Lock()
	b.batching = true
	b.mu.Unlock()
}

func (b *batchConn) flush(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batching = false
	if _, err := b.Conn.Write(b.buf); err != nil {
		t.Fatal(err)
	}
	b.buf = nil
}

// dialBatched dials addr over TLS 1.3 with ALPN proto, records of up to
// 16 KiB from the start (no dynamic sizing), writes batched on demand.
func dialBatched(t *testing.T, addr, proto string) (*tls.Conn, *batchConn) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bc := &batchConn{Conn: raw}
	tc := tls.Client(bc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto},
		MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true})
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != proto {
		t.Fatalf("ALPN %q, want %q", p, proto)
	}
	return tc, bc
}

// TestH2BodyAtRecordBoundary: an h2 request whose HEADERS and DATA come
// in two records read at once, their plaintext together just over the
// loop's 16 KiB buffer, is answered. The DATA's last bytes were left
// opened in the record state with nothing more to come from the client
// (it waits for the answer): the loop slept on a socket with nothing to
// report. Sizes around the boundary, on both h2 paths.
func TestH2BodyAtRecordBoundary(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, strconv.Itoa(len(b)))
	})
	for _, front := range []string{"tls-loop", "tls-portable"} {
		t.Run(front, func(t *testing.T) {
			h := startH2Front(t, front, be)
			for _, size := range []int{16250, 16300, 16320, 16330, 16340, 16345, 16350, 16360, 16375, 16384} {
				tc, bc := dialBatched(t, h.addr, "h2")
				io.WriteString(tc, http2.ClientPreface)
				fr := http2.NewFramer(tc, tc)
				fr.WriteSettings()
				// The settings exchange first: nothing the client sends
				// after the request may wake the loop.
				for acked, got := false, false; !acked || !got; {
					f, err := fr.ReadFrame()
					if err != nil {
						t.Fatal(err)
					}
					if sf, ok := f.(*http2.SettingsFrame); ok {
						if sf.IsAck() {
							acked = true
						} else {
							got = true
							fr.WriteSettingsAck()
						}
					}
				}
				bc.batch()
				writeHead(t, fr, 1, false, ":method", "POST", ":scheme", "https", ":authority", "a.test", ":path", "/",
					"content-length", strconv.Itoa(size))
				fr.WriteData(1, true, bytes.Repeat([]byte{'d'}, size))
				bc.flush(t)
				_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
				a := readAnswers(t, fr, true, 1)[1]
				if a.status != 200 || string(a.body) != strconv.Itoa(size) {
					t.Fatalf("size %d: %d %q", size, a.status, a.body)
				}
				tc.Close()
			}
		})
	}
}

// TestTLSPipelinedAtRecordBoundary: HTTP/1.1 requests pipelined in two
// records read at once, the first two requests filling the loop's 16 KiB
// buffer exactly and the third left opened in the record state: all
// three are answered, with nothing more from the client.
func TestTLSPipelinedAtRecordBoundary(t *testing.T) {
	for _, e := range engines {
		t.Run(e, func(t *testing.T) {
			h := tlsLoopProxy(t, e, func(r *http.Request) string { return r.URL.Path })
			tc, bc := dialBatched(t, h.addr, "http/1.1")
			reqA := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
			reqC := "GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
			headB := "GET /b HTTP/1.1\r\nHost: x\r\nX-Pad: "
			pad := 16384 - len(reqA) - len(headB) - len("\r\n\r\n")
			reqB := headB + string(bytes.Repeat([]byte{'p'}, pad)) + "\r\n\r\n"
			bc.batch()
			io.WriteString(tc, reqA)
			io.WriteString(tc, reqB+reqC) // two records: 16 KiB and the rest
			bc.flush(t)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(tc)
			for _, want := range []string{"/a", "/b", "/c"} {
				if st, b := readResp(t, br); st != 200 || b != want {
					t.Fatalf("%d %q, want 200 %q", st, b, want)
				}
			}
		})
	}
}

// corruptConn flips the last byte (the tag) of the next record written
// once armed: the server cannot authenticate it.
type corruptConn struct {
	net.Conn
	armed atomic.Bool
}

func (c *corruptConn) Write(p []byte) (int, error) {
	if c.armed.CompareAndSwap(true, false) {
		q := append([]byte(nil), p...)
		q[len(q)-1] ^= 1
		return c.Conn.Write(q)
	}
	return c.Conn.Write(p)
}

// TestTLSAlertToRealClient: Go's crypto/tls client, whose record fails
// to authenticate, reads the bad_record_mac alert sentry sends before it
// closes: on the loops (HTTP/1.1 and h2), after a hand-off to fasthttp
// (tls13.Conn), and on the old path (crypto/tls's own).
func TestTLSAlertToRealClient(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h, _ := h2LoopProxy(t, be, nil)
	for _, tc := range []struct {
		name, proto, before string
	}{
		{"loop", "http/1.1", ""},
		{"h2 loop", "h2", http2.ClientPreface},
		{"handed off", "http/1.1", "GET / HTTP/1.1\r\nHost: x\r\n"}, // a partial head: fasthttp's
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.DialTimeout("tcp", h.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			cc := &corruptConn{Conn: raw}
			c := tls.Client(cc, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{tc.proto}, MinVersion: tls.VersionTLS13})
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			d := loopCounts(t, h, policy.EngineLoops)
			if tc.before != "" {
				io.WriteString(c, tc.before)
				if tc.name == "handed off" {
					d.waitHanded(t, 1) // the bad record is then fasthttp's to read
				}
			}
			cc.armed.Store(true)
			io.WriteString(c, "x")
			_, err = io.ReadAll(c)
			if err == nil || !strings.Contains(err.Error(), "remote error: tls: bad record MAC") {
				t.Fatalf("client read error %v, want the bad_record_mac alert", err)
			}
		})
	}
}

// TestTLSUselessFloodCutOff: a client sending 100,000 records without
// data (empty ones, or KeyUpdates) is cut off with unexpected_message,
// on the loops and on a connection handed to fasthttp; another
// connection of the same listener is served meanwhile.
func TestTLSUselessFloodCutOff(t *testing.T) {
	h := tlsLoopProxy(t, policy.EngineLoops, func(*http.Request) string { return "ok" })
	for _, tc := range []struct {
		name, before string
		keyUpdate    bool
	}{
		{"empty", "", false},
		{"key updates", "", true},
		{"empty, handed off", "GET / HTTP/1.1\r\nHost: x\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := loopCounts(t, h, policy.EngineLoops)
			c := dialRecords(t, h.addr)
			if tc.before != "" {
				c.send(t, tc.before)
				d.waitHanded(t, 1) // the flood is then fasthttp's to read
			}
			// 100,000 records, sealed and sent a thousand at a time
			// until a write fails (sentry closed).
			go func() {
				var flood []byte
				for range 100 {
					flood = flood[:0]
					for range 1000 {
						if tc.keyUpdate {
							c.st.RequestKeyUpdate()
							flood = c.st.Seal(flood, nil)
						} else {
							flood = c.st.SealEmpty(flood)
						}
					}
					if _, err := c.raw.Write(flood); err != nil {
						return
					}
				}
			}()
			other := dialH1(t, h.addr, nil)
			if got := other.get(t); got != "200 ok" {
				t.Errorf("another connection got %q", got)
			}
			var err error
			for err == nil {
				_, err = c.read(make([]byte, 1024))
			}
			if err != tls13.PeerAlert(10) {
				t.Fatalf("client read error %v, want unexpected_message (10)", err)
			}
		})
	}
}

// TestTLSLoopOpenSSLShapes: OpenSSL's s_client, in the handshake shapes
// the loops take over from crypto/tls -- a full handshake, one resumed
// from its session (-sess_out, -sess_in), one after a HelloRetryRequest
// (-groups offering first a group Go lacks) -- sends a request, a
// KeyUpdate asking for ours (K) and another request; both are answered
// on the loops.
func TestTLSLoopOpenSSLShapes(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	h := tlsLoopProxy(t, policy.EngineLoops, func(r *http.Request) string { return r.URL.Path })
	dir := t.TempDir()
	sess := filepath.Join(dir, "sess.pem")
	for _, tc := range []struct {
		name    string
		args    []string
		resumed bool
		hrr     bool
	}{
		{"full", []string{"-sess_out", sess}, false, false},
		{"resumed", []string{"-sess_in", sess}, true, false},
		{"hello retry", []string{"-groups", "x448:P-256"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := loopCounts(t, h, policy.EngineLoops)
			msgs := filepath.Join(dir, "msg-"+strings.ReplaceAll(tc.name, " ", "-"))
			args := append([]string{"s_client", "-quiet", "-no_ign_eof", "-crlf", "-tls1_3", "-connect", h.addr, "-msg", "-msgfile", msgs}, tc.args...)
			cmd := exec.Command("openssl", args...)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			br := bufio.NewReader(stdout)
			io.WriteString(stdin, "GET /one HTTP/1.1\nHost: x\n\n")
			if st, b := readResp(t, br); st != 200 || b != "/one" {
				t.Fatalf("%d %q", st, b)
			}
			io.WriteString(stdin, "K\n")
			// s_client takes a whole stdin read as the command when it
			// starts with K: the request must come in a read of its own
			// (not a timing assertion: see tls13's TestOpenSSLClient).
			time.Sleep(300 * time.Millisecond)
			io.WriteString(stdin, "GET /two HTTP/1.1\nHost: x\n\n")
			if st, b := readResp(t, br); st != 200 || b != "/two" {
				t.Fatalf("after the KeyUpdate: %d %q", st, b)
			}
			stdin.Close()
			_ = cmd.Wait()
			m, err := os.ReadFile(msgs)
			if err != nil {
				t.Fatal(err)
			}
			// -msg's lines: ">>> TLS 1.3, Handshake [length 00dc], ClientHello".
			if !strings.Contains(string(m), "], ServerHello\n") {
				t.Fatalf("no handshake in s_client's messages:\n%s", m)
			}
			hellos := strings.Count(string(m), "], ClientHello\n")
			if hrr := hellos == 2; hrr != tc.hrr {
				t.Errorf("%d ClientHellos, want a HelloRetryRequest: %v", hellos, tc.hrr)
			}
			// A resumed handshake has no server Certificate.
			if resumed := !strings.Contains(string(m), "], Certificate\n"); resumed != tc.resumed {
				t.Errorf("resumed %v, want %v", resumed, tc.resumed)
			}
			d.check(t, 2, 0)
		})
	}
}
