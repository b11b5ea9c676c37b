package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statusJSON is the part of /status.json the tests read.
type statusJSON struct {
	Time float64 `json:"time"`
	Apps []struct {
		Name     string `json:"name"`
		Mode     string `json:"mode"`
		Classes  []struct{ Name string }
		Backends []struct {
			Addr    string
			Healthy bool
		}
	} `json:"apps"`
}

func getStatus(t *testing.T, admin string) statusJSON {
	t.Helper()
	code, body := get(t, "http://"+admin+"/status.json")
	if code != 200 {
		t.Fatalf("status.json: %d %s", code, body)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("status.json: %v\n%s", err, body)
	}
	return s
}

// slowStatusJSON serves the admin port at the returned base URL, holding
// each /status.json response for d of real time first.
func slowStatusJSON(t *testing.T, admin string, d time.Duration) string {
	t.Helper()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: admin})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status.json" {
			time.Sleep(d)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// chromiumBin finds a Chromium to drive headless, or skips.
func chromiumBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not on PATH: skipping the headless check of the status page (.ci/run installs it: apt-get install -y chromium)")
	return ""
}

// chromium runs a headless Chromium with no network use of its own on url
// with the extra flags, and returns its stdout.
func chromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000", "--window-size=1280,1400"}
	cmd := exec.CommandContext(ctx, bin, append(append(args, extra...), url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return stdout.Bytes()
}

// TestDemoStatusPage runs the demo with its load and renders the status
// page in headless Chromium: the JavaScript must have fetched
// /status.json and filled in every class's numbers.
func TestDemoStatusPage(t *testing.T) {
	listen, admin := freePort(t), freePort(t)
	p := startSentry(t, "http://"+admin+"/readyz", "demo", "-listen", listen, "-admin", admin, "-duration", "30s")

	// / on the admin port redirects to the page.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get("http://" + admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/status" {
		t.Errorf("GET /: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = http.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("GET /status: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	// The load is flowing and the classes are known.
	want := []string{"gold", "silver", "bronze"}
	deadline := time.Now().Add(5 * time.Second)
	var s statusJSON
	for {
		s = getStatus(t, admin)
		var names []string
		if len(s.Apps) == 1 {
			for _, c := range s.Apps[0].Classes {
				names = append(names, c.Name)
			}
		}
		if strings.Join(names, ",") == strings.Join(want, ",") && s.Apps[0].Mode != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.json: want app demo with classes %v and an admission mode (is the admission stack wired into the daemon: proxy.Options.Control?), got %+v", want, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(s.Apps[0].Backends) != 3 {
		t.Errorf("backends: %+v", s.Apps[0].Backends)
	}
	time.Sleep(time.Second) // some traffic to count

	// Chromium runs on virtual time (--virtual-time-budget): its one-second
	// poll timer fires as soon as the last fetch is back, so without help
	// two polls lie a few real milliseconds apart and a rate between them
	// is often 0 at the demo's starting load. Virtual time stands still
	// while a fetch is pending, so a proxy that holds each /status.json for
	// 300 ms gives every poll a real window with traffic in it.
	page := slowStatusJSON(t, admin, 300*time.Millisecond)
	bin := chromiumBin(t)
	dom := string(chromium(t, bin, page+"/status", "--dump-dom"))
	if m := regexp.MustCompile(`<p id="updated">([^<]*)</p>`).FindStringSubmatch(dom); m == nil || !strings.HasPrefix(m[1], "Live · updated ") {
		t.Errorf("the page did not go live: %q\n%s", m, dom)
	}
	if !strings.Contains(dom, "<h2>App demo</h2>") {
		t.Errorf("no app section:\n%s", dom)
	}
	total := 0.0
	for _, name := range want {
		// The class's row, with its arrival, admitted and rejected rates.
		re := regexp.MustCompile(`<th scope="row"><span><i class="key"[^>]*></i>` + name +
			`</span></th><td data-k="arrival">([0-9.]+)</td><td data-k="admitted">([0-9.]+)</td><td data-k="rejected">([0-9.]+)</td>`)
		m := re.FindStringSubmatch(dom)
		if m == nil {
			t.Errorf("class %s: no row with numbers filled in", name)
			continue
		}
		for _, v := range m[1:] {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	if total == 0 && !t.Failed() {
		t.Errorf("every rate is 0 under load")
	}
	t.Logf("the classes' rates on the page add up to %.1f/s", total)
	for _, be := range s.Apps[0].Backends {
		if !strings.Contains(dom, html.EscapeString(be.Addr)) {
			t.Errorf("backend %s not shown", be.Addr)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	if dir := os.Getenv("SENTRY_SCREENSHOT_DIR"); dir != "" {
		shot = filepath.Join(dir, "status.png")
	}
	chromium(t, bin, page+"/status", "--screenshot="+shot, "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10000 {
		t.Errorf("screenshot %s: %d bytes, not a plausible PNG", shot, len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	// The terminal view printed the classes (plain lines: not a terminal).
	out := p.out.String()
	for _, w := range []string{"http://" + admin + "/status", "load: cycle 1", "gold", "127.0.0.1:"} {
		if !strings.Contains(out, w) {
			t.Errorf("demo output lacks %q", w)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("ANSI escapes written to a pipe")
	}
}

// TestDemoNoLoad: the farm and the proxy only; requests go through, and
// the demo stops by itself after -duration.
func TestDemoNoLoad(t *testing.T) {
	listen, admin := freePort(t), freePort(t)
	start := time.Now()
	p := startSentry(t, "http://"+admin+"/readyz", "demo", "-duration", "3s", "-no-load", "-listen", listen, "-admin", admin)
	for _, path := range []string{"/", "/search", "/checkout/cart", "/static/logo.png"} {
		if code, body := get(t, "http://"+listen+path); code != 200 || body == "" {
			t.Errorf("GET %s through the proxy: %d, %d bytes", path, code, len(body))
		}
	}
	s := getStatus(t, admin)
	if len(s.Apps) != 1 || s.Apps[0].Name != "demo" || len(s.Apps[0].Backends) != 3 {
		t.Errorf("status.json: %+v", s)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("demo did not stop within 10s of a 3s -duration")
	}
	if el := time.Since(start); el < 3*time.Second {
		t.Errorf("stopped after %v, before -duration", el)
	}
	out := p.out.String()
	for _, w := range []string{fmt.Sprintf("http://%s/status", admin), "curl -i http://" + listen + "/search", "Load: off"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
