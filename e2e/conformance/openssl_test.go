package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const opensslInstall = "apt-get install openssl"

// What OpenSSL's -msg shows (written to -msgfile), as patterns.
var (
	// A record of application data the client sent (TLS 1.3: the inner
	// content type 0x17).
	msgClientAppData = regexp.MustCompile(`(?m)^>>> [^\n]*InnerContent \[length 0001\]\n\s+17\s*$`)
	msgClientKU      = regexp.MustCompile(`(?m)^>>> TLS 1\.3, Handshake \[length 0005\], KeyUpdate$`)
	// The server's KeyUpdate, update_not_requested (the answer to ours).
	msgServerKU   = regexp.MustCompile(`(?m)^<<< TLS 1\.3, Handshake \[length 0005\], KeyUpdate\n\s+18 00 00 01 00\s*$`)
	msgServerHelo = regexp.MustCompile(`(?m)^<<< TLS [0-9.]+, Handshake \[length [0-9a-f]+\], ServerHello$`)
	msgServerCert = regexp.MustCompile(`(?m)^<<< TLS [0-9.]+, Handshake \[length [0-9a-f]+\], Certificate$`)
)

// sclient is one run of openssl s_client against a sentry TLS listener,
// with its stdin held open (s_client closes the connection at stdin's
// end) and its -msg trace in a file.
type sclient struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out, err *syncBuffer
	stdout   io.Reader // startSClientRaw's: the data received (out keeps a copy)
	msgFile  string
	done     chan struct{}
}

// startSClient starts s_client verifying addr's certificate against ca,
// with args added. Without -quiet its stdout holds the session summary
// ("New, TLSv1.3, …" or "Reused, …") and the data received, and its
// one-letter commands (K: KeyUpdate) are on.
func startSClient(t *testing.T, bin, addr, ca string, args ...string) *sclient {
	t.Helper()
	return startSClientOut(t, bin, addr, ca, false, args...)
}

// startSClientRaw is startSClient with stdout a pipe of the raw data
// received (-quiet, commands kept on by -no_ign_eof).
func startSClientRaw(t *testing.T, bin, addr, ca string, args ...string) *sclient {
	t.Helper()
	return startSClientOut(t, bin, addr, ca, true, append([]string{"-quiet", "-no_ign_eof"}, args...)...)
}

func startSClientOut(t *testing.T, bin, addr, ca string, raw bool, args ...string) *sclient {
	t.Helper()
	c := &sclient{out: newSyncBuffer(), err: newSyncBuffer(), done: make(chan struct{})}
	c.msgFile = filepath.Join(t.TempDir(), "msg")
	all := append([]string{"s_client", "-connect", addr, "-CAfile", ca, "-verify_return_error", "-msg", "-msgfile", c.msgFile}, args...)
	c.cmd = exec.Command(bin, all...)
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	var pipe io.ReadCloser
	var pr *io.PipeReader
	var pw *io.PipeWriter
	if raw {
		if pipe, err = c.cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
		pr, pw = io.Pipe()
		c.stdout = pr
	} else {
		c.cmd.Stdout = c.out
	}
	c.cmd.Stderr = c.err
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		if raw {
			// What the test reads, kept for the failure log too.
			io.Copy(io.MultiWriter(c.out, pw), pipe)
			pw.Close()
		}
		c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		if pr != nil {
			pr.Close()
		}
		c.stdin.Close()
		c.cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			msg, _ := os.ReadFile(c.msgFile)
			t.Logf("s_client %s\nstdout:\n%s\nstderr:\n%s\n-msg:\n%s", strings.Join(all, " "), tail(c.out.String(), 3000), tail(c.err.String(), 2000), tail(string(msg), 6000))
		}
	})
	return c
}

func (c *sclient) write(t *testing.T, b []byte) {
	t.Helper()
	if _, err := c.stdin.Write(b); err != nil {
		t.Fatalf("writing to s_client: %v", err)
	}
}

// count is how many times re matches the -msg trace so far.
func (c *sclient) count(re *regexp.Regexp) int {
	b, _ := os.ReadFile(c.msgFile)
	return len(re.FindAll(b, -1))
}

// waitMsg waits until re matches the -msg trace at least n times.
func (c *sclient) waitMsg(t *testing.T, re *regexp.Regexp, n int, what string) {
	t.Helper()
	c.waitFor(t, func() bool { return c.count(re) >= n }, what)
}

// waitOut waits until stdout holds s.
func (c *sclient) waitOut(t *testing.T, s, what string) {
	t.Helper()
	c.waitFor(t, func() bool { return strings.Contains(c.out.String(), s) }, what)
}

// waitFor polls ok (s_client's output, written by another process)
// until it holds, for at most 15 s or until s_client ends.
func (c *sclient) waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		select {
		case <-c.done:
			if ok() {
				return
			}
			t.Fatalf("s_client ended before %s", what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 15s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits until s_client ends: the server closed the connection.
func (c *sclient) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: the connection was not closed within 15s", what)
	}
}

// answered checks that stdout holds a 200 whose body is want.
func (c *sclient) answered(t *testing.T, what, want string) {
	t.Helper()
	out := c.out.String()
	if !strings.Contains(out, "HTTP/1.1 200 OK\r\n") || !strings.Contains(out, "\r\n\r\n"+want) {
		t.Errorf("%s: no 200 with body %q", what, want)
	}
}

func getClose() []byte {
	return []byte("GET /echo HTTP/1.1\r\nHost: conformance\r\nConnection: close\r\n\r\n")
}

// TestOpenSSL: OpenSSL's s_client against a TLS listener (HTTP/1.1 by
// ALPN; on TLS 1.3 the event loops run its record layer): TLS 1.3 and
// TLS 1.2; a KeyUpdate in the middle of a request's body, with and
// without update_requested; session resumption from a saved session on
// both versions; a HelloRetryRequest. Each handshake is followed by a
// request that must be answered.
func TestOpenSSL(t *testing.T) {
	bin := tool(t, "", opensslInstall, "openssl")
	s := startSentry(t, frontTLSLoop, echoBackend(t), appOpts{})
	empty := echoOf(nil)
	h1 := []string{"-alpn", "http/1.1"}

	for _, v := range []struct{ flag, name string }{{"-tls1_3", "TLSv1.3"}, {"-tls1_2", "TLSv1.2"}} {
		t.Run(v.name, func(t *testing.T) {
			c := startSClient(t, bin, s.addr, s.ca, append(h1, v.flag)...)
			c.write(t, getClose())
			c.wait(t, "GET")
			if !strings.Contains(c.out.String(), "New, "+v.name+", Cipher is ") {
				t.Errorf("not a new %s session", v.name)
			}
			c.answered(t, "GET", empty)
		})
	}

	for _, ku := range []struct {
		cmd       string
		requested bool
	}{{"K", true}, {"k", false}} {
		t.Run("KeyUpdate-"+map[bool]string{true: "requested", false: "not-requested"}[ku.requested], func(t *testing.T) {
			c := startSClient(t, bin, s.addr, s.ca, append(h1, "-tls1_3")...)
			// Text: s_client would take a read starting with K, k, Q or R
			// as a command.
			body := bytes.Repeat([]byte("0123456789-body-"), 3000/16)
			c.write(t, fmt.Appendf(nil, "POST /echo HTTP/1.1\r\nHost: conformance\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:1000]))
			c.waitMsg(t, msgClientAppData, 1, "the request's first part sent")
			// A read of its own: s_client takes a read that starts with
			// K (k) as the command.
			c.write(t, []byte(ku.cmd+"\n"))
			c.waitMsg(t, msgClientKU, 1, "the client's KeyUpdate sent")
			c.write(t, body[1000:])
			c.waitOut(t, echoOf(body), "the answer to the request the KeyUpdate cut")
			if ku.requested && c.count(msgServerKU) != 1 {
				t.Errorf("the client asked for a KeyUpdate (update_requested); the server sent %d, want 1", c.count(msgServerKU))
			}
			c.write(t, getClose())
			c.wait(t, "GET after the KeyUpdate")
			if n := strings.Count(c.out.String(), "HTTP/1.1 200 OK\r\n"); n != 2 {
				t.Errorf("%d answers 200, want 2 (the POST cut by the KeyUpdate, then a GET)", n)
			}
			c.answered(t, "GET after the KeyUpdate", empty)
		})
	}

	for _, v := range []struct{ flag, name string }{{"-tls1_3", "TLSv1.3"}, {"-tls1_2", "TLSv1.2"}} {
		t.Run("resumption-"+v.name, func(t *testing.T) {
			sess := filepath.Join(t.TempDir(), "session")
			c := startSClient(t, bin, s.addr, s.ca, append(h1, v.flag, "-sess_out", sess)...)
			c.write(t, getClose())
			c.wait(t, "first GET")
			c.answered(t, "first GET", empty)
			if st, err := os.Stat(sess); err != nil || st.Size() == 0 {
				t.Fatalf("no session saved (%v): no ticket or session ID from the server", err)
			}
			r := startSClient(t, bin, s.addr, s.ca, append(h1, v.flag, "-sess_in", sess)...)
			r.write(t, getClose())
			r.wait(t, "GET on the resumed session")
			if !strings.Contains(r.out.String(), "Reused, "+v.name+", Cipher is ") {
				t.Errorf("the session was not resumed (s_client did not say Reused, %s)", v.name)
			}
			if n := r.count(msgServerCert); n != 0 {
				t.Errorf("the resumed handshake carried the server's certificate (%d)", n)
			}
			r.answered(t, "GET on the resumed session", empty)
		})
	}

	t.Run("HelloRetryRequest", func(t *testing.T) {
		// X448 first: OpenSSL sends a key share for it alone, which Go
		// does not implement, so the server asks again for X25519.
		c := startSClient(t, bin, s.addr, s.ca, append(h1, "-tls1_3", "-groups", "X448:X25519")...)
		c.write(t, getClose())
		c.wait(t, "GET after a HelloRetryRequest")
		if n := c.count(msgServerHelo); n != 2 {
			t.Errorf("%d ServerHellos, want 2 (a HelloRetryRequest is one)", n)
		}
		if !strings.Contains(c.out.String(), "New, TLSv1.3, Cipher is ") {
			t.Errorf("not a new TLSv1.3 session")
		}
		c.answered(t, "GET after a HelloRetryRequest", empty)
	})
}

// TestOpenSSLKeyUpdateH2: a KeyUpdate (update_requested) in the middle of
// an h2 request body, over both drivers of h2 over TLS: s_client carries
// the frames (written here with x/net's framer) and the client's
// KeyUpdate between two DATA frames; the server answers with its own
// KeyUpdate, and the response (the echo of the whole body) comes under
// the new keys.
func TestOpenSSLKeyUpdateH2(t *testing.T) {
	bin := tool(t, "", opensslInstall, "openssl")
	be := echoBackend(t)
	for _, f := range []front{frontTLSLoop, frontTLSGoroutine} {
		t.Run(f.String(), func(t *testing.T) {
			s := startSentry(t, f, be, appOpts{})
			s.checkDriver(t)
			c := startSClientRaw(t, bin, s.addr, s.ca, "-alpn", "h2", "-tls1_3")
			body := pattern(40000)
			var w bytes.Buffer
			fr := http2.NewFramer(&w, nil)
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "conformance"}, {":path", "/echo"}, {"content-length", fmt.Sprint(len(body))}} {
				enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
			}
			w.WriteString(http2.ClientPreface)
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
			fr.WriteData(1, false, body[:10000])
			c.write(t, w.Bytes())
			c.waitMsg(t, msgClientAppData, 1, "the preface, HEADERS and the first DATA sent")
			c.write(t, []byte("K\n"))
			c.waitMsg(t, msgClientKU, 1, "the client's KeyUpdate sent")
			w.Reset()
			for off := 10000; off < len(body); off += 16384 {
				end := min(off+16384, len(body))
				fr.WriteData(1, end == len(body), body[off:end])
			}
			c.write(t, w.Bytes())

			// Read the server's frames until stream 1 ends.
			type answer struct {
				status string
				body   []byte
				err    error
			}
			got := make(chan answer, 1)
			go func() {
				var a answer
				rf := http2.NewFramer(io.Discard, c.stdout)
				rf.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				for {
					fm, err := rf.ReadFrame()
					if err != nil {
						a.err = err
						got <- a
						return
					}
					switch fm := fm.(type) {
					case *http2.MetaHeadersFrame:
						if fm.StreamID == 1 && a.status == "" {
							a.status = fm.PseudoValue("status")
						}
					case *http2.DataFrame:
						if fm.StreamID == 1 {
							a.body = append(a.body, fm.Data()...)
							if fm.StreamEnded() {
								got <- a
								return
							}
						}
					case *http2.RSTStreamFrame:
						a.err = fmt.Errorf("RST_STREAM %v", fm.ErrCode)
						got <- a
						return
					case *http2.GoAwayFrame:
						a.err = fmt.Errorf("GOAWAY %v", fm.ErrCode)
						got <- a
						return
					}
				}
			}()
			var a answer
			select {
			case a = <-got:
			case <-time.After(15 * time.Second):
				c.cmd.Process.Kill()
				a = <-got
				a.err = errors.Join(errors.New("no end of the response within 15s"), a.err)
			}
			if a.err != nil || a.status != "200" || string(a.body) != echoOf(body) {
				t.Errorf("POST of %d bytes cut by a KeyUpdate: status %q body %q (%v); want 200 %q", len(body), a.status, a.body, a.err, echoOf(body))
			}
			if n := c.count(msgServerKU); n != 1 {
				t.Errorf("the client asked for a KeyUpdate (update_requested); the server sent %d, want 1", n)
			}
		})
	}
}
