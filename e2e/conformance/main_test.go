package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/freeport"
	"github.com/sentry-proxy/sentry/internal/testpki"
	"golang.org/x/net/http2"
)

// sentryBin is the binary built once for the package's tests.
var sentryBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sentry-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sentryBin = filepath.Join(dir, "sentry")
	build := exec.Command("go", "build", "-o", sentryBin, "../../cmd/sentry")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sentry:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// suitesRequired: SENTRY_SUITES_REQUIRED=1 (CI) turns a missing tool from
// a skip into a failure.
func suitesRequired() bool { return os.Getenv("SENTRY_SUITES_REQUIRED") == "1" }

// missing skips the test saying what is missing and how to install it,
// or fails it where the suites are required.
func missing(t *testing.T, what, install string) {
	t.Helper()
	msg := fmt.Sprintf("%s; install: %s", what, install)
	if suitesRequired() {
		t.Fatalf("SENTRY_SUITES_REQUIRED=1 and %s", msg)
	}
	t.Skip(msg)
}

// tool finds an external program: the path in the environment variable
// env if it is set (it must then exist), else the first of names on PATH.
func tool(t *testing.T, env, install string, names ...string) string {
	t.Helper()
	if env != "" {
		if p := os.Getenv(env); p != "" {
			if _, err := os.Stat(p); err != nil {
				missing(t, fmt.Sprintf("%s=%s: %v", env, p, err), install)
			}
			return p
		}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	what := strings.Join(names, " or ") + " not on PATH"
	if len(names) == 0 {
		what = env + " not set"
	} else if env != "" {
		what += " and " + env + " not set"
	}
	missing(t, what, install)
	return ""
}

// run runs a tool within d and returns its stdout and stderr; a tool that
// outlives d is killed, and the error says so.
func run(t *testing.T, d time.Duration, dir string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v (%v)", filepath.Base(name), d, err)
	}
	return o.String(), e.String(), err
}

// pki is the test certificate of a TLS front end: a CA and a leaf for
// 127.0.0.1 (internal/testpki), valid for 90 days and naming a CRL as a
// public CA's would, so that a scanner rating the certificate finds
// nothing to say about the test PKI's shortcuts.
func pki(t *testing.T) *testpki.PKI {
	t.Helper()
	p, err := testpki.NewWith(t.TempDir(), testpki.Options{
		Validity: 90 * 24 * time.Hour,
		CRL:      "http://127.0.0.1:9/ca.crl",
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// caFile writes p's CA alone, for clients that take a CA file.
func caFile(t *testing.T, p *testpki.PKI) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, pemCert(p.CA), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// front is how a client reaches sentry's HTTP/2 side.
type front int

const (
	frontTLSLoop      front = iota // h2 over TLS on the event loops (Linux's default)
	frontTLSGoroutine              // h2 over TLS on the goroutine driver
	frontH2C                       // cleartext h2 with prior knowledge (apps[].h2c); the goroutine driver
)

// fronts is every front end, for suites that run on each.
var fronts = []front{frontTLSLoop, frontTLSGoroutine, frontH2C}

func (f front) String() string {
	return [...]string{"tls-loop", "tls-goroutine", "h2c"}[f]
}

func (f front) tls() bool { return f != frontH2C }

// engine is the server.engine a front end runs on: the goroutine driver
// of h2 over TLS is the portable engine's (which also takes HTTP/1.1 and
// TLS off the loops); the others run on the default, loops.
func (f front) engine() string {
	if f == frontTLSGoroutine {
		return "portable"
	}
	return "loops"
}

// h2Driver is the one place that says how a test picks sentry's driver of
// h2 over TLS: the policy's server section, server.engine (the default,
// loops, is written out too, so the policy says which one it asks for).
func h2Driver(f front) (serverLines string) {
	return fmt.Sprintf("server:\n  engine: %s\n", f.engine())
}

// sentry is one running sentry process with one app.
type sentry struct {
	f      front
	addr   string // the app's listener
	probe  string // a TLS front's second app, HTTP/1.1 to an echoBackend: see checkDriver
	admin  string
	ca     string // the CA file verifying the TLS listener's leaf
	pki    *testpki.PKI
	out    *syncBuffer
	policy string
}

// url is the app's URL for path.
func (s *sentry) url(path string) string {
	if s.f.tls() {
		return "https://" + s.addr + path
	}
	return "http://" + s.addr + path
}

// port is the app's listening port.
func (s *sentry) port() string {
	_, p, _ := net.SplitHostPort(s.addr)
	return p
}

// appOpts adds to the one app's policy.
type appOpts struct {
	backendProtocol string // backends.protocol; "" is http1
}

// startSentry runs the binary with one app on front f relaying to
// backend, and waits until it is ready. Admission is off: these suites
// prove protocols, and a 503 from an admission decision on a busy CI
// machine would be noise, not a finding.
func startSentry(t *testing.T, f front, backend string, o appOpts) *sentry {
	t.Helper()
	if f == frontTLSLoop && runtime.GOOS != "linux" {
		t.Skip("the event loops (and their h2 driver) are Linux-only")
	}
	s := &sentry{f: f, addr: freePort(t), admin: freePort(t), out: newSyncBuffer()}
	var app strings.Builder
	fmt.Fprintf(&app, "  - name: conf\n    listen: %s\n", s.addr)
	if f.tls() {
		s.pki = pki(t)
		s.ca = caFile(t, s.pki)
		fmt.Fprintf(&app, "    tls: {cert: %q, key: %q}\n", s.pki.CertFile, s.pki.KeyFile)
	} else {
		app.WriteString("    h2c: true\n")
	}
	fmt.Fprintf(&app, "    backends:\n      static: [%s]\n", backend)
	if o.backendProtocol != "" {
		fmt.Fprintf(&app, "      protocol: %s\n", o.backendProtocol)
	}
	app.WriteString("    admission: {mode: off}\n")
	if f.tls() {
		s.probe = freePort(t)
		fmt.Fprintf(&app, "  - name: probe\n    listen: %s\n    tls: {cert: %q, key: %q}\n    backends: {static: [%s]}\n    admission: {mode: off}\n",
			s.probe, s.pki.CertFile, s.pki.KeyFile, echoBackend(t))
	}
	s.policy = fmt.Sprintf("%sadmin:\n  listen: %s\napps:\n%s", h2Driver(f), s.admin, app.String())
	cfg := filepath.Join(t.TempDir(), "sentry.yaml")
	if err := os.WriteFile(cfg, []byte(s.policy), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sentryBin, "run", "-config", cfg)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("sentry (%s) policy:\n%s\nsentry output:\n%s", f, s.policy, tail(s.out.String(), 8000))
		}
	})
	waitReady(t, "http://"+s.admin+"/readyz", 15*time.Second)
	return s
}

// checkDriver proves the process serves h2 over TLS the way the front
// end's name says: sentry_build_info names the engine h2Driver asked for,
// and one h2 GET over TLS 1.3 to the probe app (an HTTP/1.1 backend, so a
// loop may run the stream itself; h2 backends' streams never do) is
// counted by sentry_evloop_requests_total when (and only when) the event
// loops drive the connection. The driver is the process's, so the probe
// speaks for the app under test.
func (s *sentry) checkDriver(t *testing.T) {
	t.Helper()
	if !s.f.tls() {
		return
	}
	if got := s.metric(t, "sentry_build_info", s.f.engine()); got != 1 {
		t.Fatalf("%s: sentry_build_info{engine=%q} is %v, want 1: server.engine (h2Driver) is not in force", s.f, s.f.engine(), got)
	}
	before := s.metric(t, "sentry_evloop_requests_total", s.probe)
	tr := &http2.Transport{TLSClientConfig: s.tlsConfig()}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + s.probe + "/")
	if err != nil {
		t.Fatalf("h2 GET: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("h2 GET: %d", resp.StatusCode)
	}
	got := s.metric(t, "sentry_evloop_requests_total", s.probe) - before
	if want := map[front]float64{frontTLSLoop: 1, frontTLSGoroutine: 0}[s.f]; got != want {
		t.Fatalf("%s: an h2 GET over TLS 1.3 moved sentry_evloop_requests_total by %v, want %v: the driver switch (h2Driver) is not in force", s.f, got, want)
	}
}

func (s *sentry) tlsConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(s.pki.CA)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
}

// metric reads one sample of name whose labels contain label's value
// from the admin listener; absent is 0.
func (s *sentry) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	sum := 0.0
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") || !strings.Contains(l, `"`+label+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		sum += v
	}
	return sum
}

func waitReady(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %v", url, within)
}

func freePort(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// echoBackend is the backend of the HTTP suites, an HTTP/1.1 server on
// loopback. Every answer carries the usual security headers of a web app
// (the app's business, not sentry's, and what testssl.sh looks for) and
// its body is
//
//	len=N sha256=HEX
//
// of the request body it read, so a client can tell that its body arrived
// whole. GET /bytes/N answers N bytes of pattern(N) instead, and
// GET /fill/C/N N bytes C (one ASCII letter).
func echoBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Strict-Transport-Security", "max-age=31536000")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok && r.Method == http.MethodGet {
			size, err := strconv.Atoi(n)
			if err != nil || size < 0 || size > 16<<20 {
				http.Error(w, "bad size", 400)
				return
			}
			h.Set("Content-Length", strconv.Itoa(size))
			w.Write(pattern(size))
			return
		}
		if v, ok := strings.CutPrefix(r.URL.Path, "/fill/"); ok && r.Method == http.MethodGet {
			c, n, _ := strings.Cut(v, "/")
			size, err := strconv.Atoi(n)
			if len(c) != 1 || c[0] < 'a' || c[0] > 'z' || err != nil || size < 0 || size > 16<<20 {
				http.Error(w, "bad fill", 400)
				return
			}
			h.Set("Content-Length", strconv.Itoa(size))
			w.Write(bytes.Repeat([]byte(c), size))
			return
		}
		sum := sha256.New()
		n, err := io.Copy(sum, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		io.WriteString(w, echoLine(n, sum.Sum(nil)))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// echoLine is echoBackend's answer to a body of n bytes hashing to sum.
func echoLine(n int64, sum []byte) string {
	return fmt.Sprintf("len=%d sha256=%s\n", n, hex.EncodeToString(sum))
}

// echoOf is echoBackend's answer to body.
func echoOf(body []byte) string {
	s := sha256.Sum256(body)
	return echoLine(int64(len(body)), s[:])
}

// pattern is n bytes that are not all alike (so a shifted or repeated
// chunk shows) and the same on every call.
func pattern(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
