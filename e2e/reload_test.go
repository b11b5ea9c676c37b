package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// This file holds the reload tests and the helpers they share with
// upgrade_test.go: a rate-capped keep-alive load generator that counts
// failures, dials and connection resets; a metrics reader; a backend with a
// slow streaming download and an echo Upgrade tunnel.

// ---- load generator ----

// loadGen sends GETs from several workers, each with its own keep-alive
// connection (and, for the "fresh" workers, a new connection per request,
// which proves the listening socket accepts throughout). The total rate is
// capped; the run is bounded by count and time.
type loadGen struct {
	url     string
	host    string
	stopC   chan struct{}
	done    chan struct{}
	start   time.Time
	elapsed time.Duration

	sent, ok, failed atomic.Int64
	dials, resets    atomic.Int64
	freshOK          atomic.Int64
	retried          atomic.Int64 // requests the client sent twice (a reused conn closed under them)

	mu       sync.Mutex
	statuses map[int]int
	errs     []string
	nErrs    int
}

type loadOpts struct {
	workers int           // keep-alive workers
	fresh   int           // workers that open a new connection per request
	rate    int           // total requests per second (all workers)
	max     int64         // stop after this many requests
	maxTime time.Duration // stop after this long
}

func startLoad(url string, o loadOpts) *loadGen {
	g := &loadGen{url: url, stopC: make(chan struct{}), done: make(chan struct{}), statuses: map[int]int{}, start: time.Now()}
	n := o.workers + o.fresh
	interval := time.Duration(int64(time.Second) * int64(n) / int64(o.rate))
	deadline := time.Now().Add(o.maxTime)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		fresh := i >= o.workers
		tr := &http.Transport{
			MaxIdleConnsPerHost: 1,
			DisableKeepAlives:   fresh,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				g.dials.Add(1)
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &countingConn{Conn: c, resets: &g.resets}, nil
			},
		}
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		wg.Add(1)
		go func(offset time.Duration) {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			next := time.Now().Add(offset)
			for {
				if d := time.Until(next); d > 0 {
					select {
					case <-g.stopC:
						return
					case <-time.After(d):
					}
				}
				select {
				case <-g.stopC:
					return
				default:
				}
				if time.Now().After(deadline) || g.sent.Add(1) > o.max {
					return
				}
				next = next.Add(interval)
				g.one(client, fresh)
			}
		}(interval * time.Duration(i) / time.Duration(n))
	}
	go func() { wg.Wait(); g.elapsed = time.Since(g.start); close(g.done) }()
	return g
}

func (g *loadGen) one(c *http.Client, fresh bool) {
	req, _ := http.NewRequest("GET", g.url, nil)
	if g.host != "" {
		req.Host = g.host
	}
	conns := 0
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns++ }}))
	resp, err := c.Do(req)
	if conns > 1 {
		g.retried.Add(1)
	}
	if err != nil {
		g.fail(0, err.Error())
		return
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		g.fail(0, "body: "+err.Error())
		return
	}
	if resp.StatusCode != 200 {
		g.fail(resp.StatusCode, fmt.Sprintf("status %d", resp.StatusCode))
		return
	}
	g.ok.Add(1)
	if fresh {
		g.freshOK.Add(1)
	}
	g.mu.Lock()
	g.statuses[200]++
	g.mu.Unlock()
}

func (g *loadGen) fail(status int, msg string) {
	g.failed.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if status != 0 {
		g.statuses[status]++
	}
	g.nErrs++
	if len(g.errs) < 10 {
		g.errs = append(g.errs, time.Since(g.start).Round(time.Millisecond).String()+" "+msg)
	}
}

// stop ends the run and waits for the workers.
func (g *loadGen) stop() {
	select {
	case <-g.stopC:
	default:
		close(g.stopC)
	}
	<-g.done
}

func (g *loadGen) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.ok.Load() + g.failed.Load()
	return fmt.Sprintf("%d requests in %v (%.0f req/s): %d ok (%d on fresh connections), %d failed, statuses %v, %d dials, %d resets seen by the client, %d requests retried by the client",
		n, g.elapsed.Round(time.Millisecond), float64(n)/g.elapsed.Seconds(), g.ok.Load(), g.freshOK.Load(), g.failed.Load(), g.statuses, g.dials.Load(), g.resets.Load(), g.retried.Load())
}

// check fails t on any failed request or reset connection.
func (g *loadGen) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	errs := append([]string(nil), g.errs...)
	g.mu.Unlock()
	if g.failed.Load() > 0 {
		t.Errorf("%d requests failed; first: %v", g.failed.Load(), errs)
	}
	if g.resets.Load() > 0 {
		t.Errorf("%d connection resets seen by the client", g.resets.Load())
	}
	if g.ok.Load() == 0 {
		t.Errorf("no request succeeded")
	}
}

// countingConn counts resets (ECONNRESET, EPIPE) seen on a client
// connection, including those the HTTP client then retried silently.
type countingConn struct {
	net.Conn
	resets *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.count(err)
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.count(err)
	return n, err
}

func (c *countingConn) count(err error) {
	if err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		c.resets.Add(1)
	}
}

// ---- metrics ----

// scrape returns the admin /metrics samples as "name{labels}" -> value.
func scrape(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// waitMetric polls until series has value want and returns how long it took.
func waitMetric(t *testing.T, admin, series string, want float64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		v, ok := scrape(t, admin)[series]
		if ok && v == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s = %v (present %v), want %v within %v", series, v, ok, want, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- a backend with a slow download and an echo tunnel ----

const chunkSize = 32 << 10

// newStreamBackend serves GET /slow?chunks=N&every=D (N chunks of 32 KiB,
// one every D) and an Upgrade to "echo": after 101, every line is echoed.
func newStreamBackend(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("chunks"))
		every, _ := time.ParseDuration(r.URL.Query().Get("every"))
		chunk := make([]byte, chunkSize)
		for i := 0; i < n; i++ {
			for j := range chunk {
				chunk[j] = byte('a' + i%26)
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(every)
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", 400)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(line)
			brw.Flush()
		}
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// download fetches /slow through sentry and reports the bytes received.
func download(addr, host string, chunks int, every time.Duration) (int64, time.Duration, error) {
	start := time.Now()
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/slow?chunks=%d&every=%s", addr, chunks, every), nil)
	req.Host = host
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, time.Since(start), err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, time.Since(start), fmt.Errorf("status %d", resp.StatusCode)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != int64(chunks)*chunkSize {
		err = fmt.Errorf("got %d bytes, want %d", n, int64(chunks)*chunkSize)
	}
	return n, time.Since(start), err
}

// tunnel opens an echo tunnel through sentry, exchanges count lines, one
// every interval, then closes its side and waits for the clean end.
func tunnel(addr, host string, count int, every time.Duration) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", host)
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("tunnel head: %w", err)
	}
	if !strings.Contains(status, " 101 ") {
		return 0, fmt.Errorf("tunnel: %q", status)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if l == "\r\n" {
			break
		}
	}
	for i := 0; i < count; i++ {
		msg := fmt.Sprintf("message %d\n", i)
		if _, err := io.WriteString(c, msg); err != nil {
			return i, fmt.Errorf("tunnel write %d: %w", i, err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != msg {
			return i, fmt.Errorf("tunnel echo %d: %q, %v", i, got, err)
		}
		time.Sleep(every)
	}
	c.(*net.TCPConn).CloseWrite()
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		return count, fmt.Errorf("tunnel end: %q, %v", rest, err)
	}
	return count, nil
}

// rewrite replaces a file atomically (temporary file, then rename), as an
// operator's deploy tool should.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(strings.TrimLeft(content, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ---- the reload tests ----

type reloadPolicy struct {
	admin, listen, listen2 string
	backends               []string
	api                    bool   // a second app on listen2
	balance                string // "" = default
	idle                   string // server.idle_timeout, "" = default
	body                   string // reject body
}

func (p reloadPolicy) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "admin:\n  listen: %s\n", p.admin)
	b.WriteString("server:\n  shutdown_timeout: 5s\n")
	if p.idle != "" {
		fmt.Fprintf(&b, "  idle_timeout: %s\n", p.idle)
	}
	fmt.Fprintf(&b, "apps:\n  - name: web\n    listen: %s\n    backends:\n      static: [%s]\n", p.listen, strings.Join(p.backends, ", "))
	// The passive-health settings stay the same in every version: an
	// ejected backend must stay ejected across reloads.
	b.WriteString("    health:\n      passive: {failures: 1, cooldown: 1h}\n")
	if p.balance != "" {
		fmt.Fprintf(&b, "    balance: %s\n", p.balance)
	}
	if p.body != "" {
		fmt.Fprintf(&b, "    reject: {body: %q}\n", p.body)
	}
	if p.api {
		fmt.Fprintf(&b, "  - name: api\n    listen: %s\n    backends:\n      static: [%s]\n", p.listen2, p.backends[0])
	}
	return b.String()
}

// TestReloadUnderLoad runs ten reloads (three of them invalid policies)
// under continuous load and checks: no request fails, every reload is
// counted by result, a change shows in the metrics within a second,
// listeners are added and removed without touching the others (the load's
// keep-alive connections are never re-dialled), an ejected backend stays
// ejected and counters continue.
func TestReloadUnderLoad(t *testing.T) {
	b1 := newTestBackend(t, "b1", time.Millisecond)
	b2 := newTestBackend(t, "b2", time.Millisecond)
	b3 := newTestBackend(t, "b3", time.Millisecond)
	dead := freePort(t) // nothing listens: ejected at the first failure
	pol := reloadPolicy{admin: freePort(t), listen: freePort(t), listen2: freePort(t),
		backends: []string{b1.addr, b2.addr, dead}}
	cfg := writeFile(t, "sentry.yaml", pol.yaml())
	p := startSentry(t, "http://"+pol.admin+"/readyz", "run", "-config", cfg)
	pid := p.cmd.Process.Pid

	healthy := func(addr string) string {
		return fmt.Sprintf(`sentry_backend_healthy{app="web",backend="%s"}`, addr)
	}
	b1Count := fmt.Sprintf(`sentry_requests_total{app="web",backend="%s",code="2xx"}`, b1.addr)

	g := startLoad("http://"+pol.listen+"/", loadOpts{workers: 8, rate: 2000, max: 200000, maxTime: 30 * time.Second})
	defer g.stop()
	// The dead backend is tried, fails to connect (the request is retried
	// on another backend) and is ejected.
	waitMetric(t, pol.admin, healthy(dead), 0, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	dialsBefore := g.dials.Load()
	lastB1 := scrape(t, pol.admin)[b1Count]

	type step struct {
		name    string
		content string
		valid   bool
		after   func(t *testing.T)
	}
	bad1 := pol.yaml() + "    backendz: {}\n"                                            // unknown key
	bad2 := strings.Replace(pol.yaml(), "apps:", "apps: [\n", 1)                         // YAML syntax
	bad3 := strings.Replace(pol.yaml(), "cooldown: 1h", "cooldown: 1h, failures: -2", 1) // duplicate key, bad value
	var visible time.Duration
	steps := []step{
		{"add backend b3", func() string { q := pol; q.backends = append(q.backends, b3.addr); return q.yaml() }(), true,
			func(t *testing.T) {
				visible = waitMetric(t, pol.admin, healthy(b3.addr), 1, time.Second)
			}},
		{"invalid: unknown key", bad1, false, nil},
		{"add listener and app api", func() string {
			q := pol
			q.backends = append(q.backends, b3.addr)
			q.api = true
			return q.yaml()
		}(), true, func(t *testing.T) {
			waitMetric(t, pol.admin, `sentry_backends_healthy{app="api"}`, 1, time.Second)
			if code, body := get(t, "http://"+pol.listen2+"/"); code != 200 || body != "b1" {
				t.Errorf("new listener: %d %q", code, body)
			}
		}},
		{"invalid: YAML syntax", bad2, false, nil},
		{"remove listener and app api", func() string { q := pol; q.backends = append(q.backends, b3.addr); return q.yaml() }(), true,
			func(t *testing.T) {
				deadline := time.Now().Add(time.Second)
				for {
					c, err := net.DialTimeout("tcp", pol.listen2, 200*time.Millisecond)
					if err != nil {
						break // refused: the listener is gone
					}
					c.Close()
					if time.Now().After(deadline) {
						t.Errorf("removed listener %s still accepts", pol.listen2)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}},
		{"invalid: bad values", bad3, false, nil},
		{"round robin", func() string {
			q := pol
			q.backends = append(q.backends, b3.addr)
			q.balance = "round_robin"
			return q.yaml()
		}(), true, nil},
		{"server idle timeout (warned: applies to new listeners)", func() string {
			q := pol
			q.backends = append(q.backends, b3.addr)
			q.idle = "30s"
			return q.yaml()
		}(), true, nil},
		{"reject body", func() string {
			q := pol
			q.backends = append(q.backends, b3.addr)
			q.idle = "30s"
			q.body = "busy\n"
			return q.yaml()
		}(), true, nil},
		{"remove b3", func() string { q := pol; q.idle = "30s"; return q.yaml() }(), true, func(t *testing.T) {
			deadline := time.Now().Add(time.Second)
			for {
				if _, ok := scrape(t, pol.admin)[healthy(b3.addr)]; !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("removed backend b3 still in the metrics")
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}},
	}
	ok, bad := 0, 0
	for i, s := range steps {
		rewrite(t, cfg, s.content)
		before := time.Now()
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if s.valid {
			ok++
		} else {
			bad++
		}
		waitMetric(t, pol.admin, `sentry_policy_reloads_total{result="success"}`, float64(ok), 2*time.Second)
		waitMetric(t, pol.admin, `sentry_policy_reloads_total{result="error"}`, float64(bad), 2*time.Second)
		last := 0.0
		if s.valid {
			last = 1
		}
		waitMetric(t, pol.admin, "sentry_policy_last_reload_success", last, time.Second)
		if s.after != nil {
			s.after(t)
		}
		m := scrape(t, pol.admin)
		if v := m[healthy(dead)]; v != 0 {
			t.Errorf("after reload %d (%s): the ejected backend is healthy again", i+1, s.name)
		}
		if v := m[b1Count]; v < lastB1 {
			t.Errorf("after reload %d (%s): b1's request counter went back from %v to %v", i+1, s.name, lastB1, v)
		} else {
			lastB1 = v
		}
		t.Logf("reload %2d %-55s applied in %v", i+1, s.name, time.Since(before).Round(time.Millisecond))
		time.Sleep(150 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	g.stop()
	t.Logf("load: %s", g)
	t.Logf("new backend visible in the metrics %v after SIGHUP", visible.Round(time.Millisecond))
	g.check(t)
	if d := g.dials.Load() - dialsBefore; d != 0 {
		t.Errorf("the load re-dialled %d times during the reloads: listeners were touched", d)
	}
	if b3.hits.Load() == 0 {
		t.Errorf("added backend b3 got no requests")
	}
	out := p.out.String()
	for _, want := range []string{
		cfg + ":", // FILE:LINE errors
		"policy reload refused; the old policy stays in force",
		"server settings changed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "policy error") && strings.Contains(l, cfg+":") {
			lines++
		}
	}
	t.Logf("%d FILE:LINE policy errors logged for the 3 invalid policies", lines)
	if os.Getenv("E2E_SHOW_LOG") != "" {
		t.Logf("log:\n%s", out)
	}
	if lines < 3 {
		t.Errorf("want at least 3 FILE:LINE errors in the log, got %d:\n%s", lines, out)
	}

	// SIGTERM drains and stops.
	syscall.Kill(pid, syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- p.cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("no exit within 10s of SIGTERM")
	}
}

// TestWatchReloadsOnChange: with -watch, a changed file is reloaded without
// a signal; an invalid one is refused once, not on every poll.
func TestWatchReloadsOnChange(t *testing.T) {
	b1 := newTestBackend(t, "b1", 0)
	b2 := newTestBackend(t, "b2", 0)
	pol := reloadPolicy{admin: freePort(t), listen: freePort(t), backends: []string{b1.addr}}
	cfg := writeFile(t, "sentry.yaml", pol.yaml())
	startSentry(t, "http://"+pol.admin+"/readyz", "run", "-config", cfg, "-watch", "50ms")

	q := pol
	q.backends = []string{b1.addr, b2.addr}
	start := time.Now()
	rewrite(t, cfg, q.yaml())
	waitMetric(t, pol.admin, fmt.Sprintf(`sentry_backend_healthy{app="web",backend="%s"}`, b2.addr), 1, time.Second)
	t.Logf("file change visible in the metrics after %v", time.Since(start).Round(time.Millisecond))

	rewrite(t, cfg, q.yaml()+"  - bogus\n")
	waitMetric(t, pol.admin, `sentry_policy_reloads_total{result="error"}`, 1, time.Second)
	time.Sleep(300 * time.Millisecond) // six polls: still one error
	m := scrape(t, pol.admin)
	if v := m[`sentry_policy_reloads_total{result="error"}`]; v != 1 {
		t.Errorf("an unchanged invalid file was reloaded again: %v errors", v)
	}
	if v := m[`sentry_policy_reloads_total{result="success"}`]; v != 1 {
		t.Errorf("success count %v, want 1", v)
	}
	if code, _ := get(t, "http://"+pol.listen+"/"); code != 200 {
		t.Errorf("after the refused reload: %d", code)
	}
	rewrite(t, cfg, pol.yaml())
	waitMetric(t, pol.admin, `sentry_policy_reloads_total{result="success"}`, 2, time.Second)
	waitMetric(t, pol.admin, "sentry_policy_last_reload_success", 1, time.Second)
}
