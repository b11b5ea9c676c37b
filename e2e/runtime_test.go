package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowBackend answers every request after a delay and records when each
// arrived, how many are in flight, and its open connections.
type slowBackend struct {
	addr     string
	delay    time.Duration
	inflight atomic.Int32
	done     atomic.Int32
	conns    atomic.Int32

	mu       sync.Mutex
	arrivals []time.Time
}

func newSlowBackend(t *testing.T, name string, delay time.Duration) *slowBackend {
	t.Helper()
	b := &slowBackend{delay: delay}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = ln.Addr().String()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.mu.Lock()
			b.arrivals = append(b.arrivals, time.Now())
			b.mu.Unlock()
			b.inflight.Add(1)
			defer b.inflight.Add(-1)
			time.Sleep(b.delay) // the backend's service time
			if _, err := fmt.Fprint(w, name); err == nil {
				b.done.Add(1)
			}
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				b.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				b.conns.Add(-1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

// arrivedAfter counts the requests that arrived after t.
func (b *slowBackend) arrivedAfter(t time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, a := range b.arrivals {
		if a.After(t) {
			n++
		}
	}
	return n
}

func (b *slowBackend) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.arrivals)
}

// waitFor polls cond (bounded) and fails with what when it stays false.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sentryCmd runs the binary with args and returns its exit code and
// output.
func sentryCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(sentryBin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("sentry %v: %v", args, err)
	}
	return 0, string(out)
}

// TestRuntimeDrainUnderLoad: with the real binary under a steady load, a
// backend drained with `sentry admin` gets no request that sentry had not
// already sent it when the drain answered; the requests in flight to it
// finish (no request fails); its connections from sentry close once it is
// drained; /config and the metrics show the override; and a reload
// (`sentry reload`) ends it, the backend taking requests again.
func TestRuntimeDrainUnderLoad(t *testing.T) {
	a := newSlowBackend(t, "a", 100*time.Millisecond)
	b := newSlowBackend(t, "b", 100*time.Millisecond)
	listen, admin := freePort(t), freePort(t)
	cfg := writeFile(t, "policy.yaml", fmt.Sprintf(`
admin: {listen: %s}
apps:
  - name: web
    listen: %s
    backends: {static: [%s, %s]}
    admission: {mode: "off"}
`, admin, listen, a.addr, b.addr))
	p := startSentry(t, "http://"+admin+"/readyz", "run", "-config", cfg)

	load := startLoad("http://"+listen+"/", loadOpts{workers: 12, rate: 200, max: 5000, maxTime: 30 * time.Second})
	defer load.stop()
	waitFor(t, 10*time.Second, "requests in flight to a", func() bool { return a.inflight.Load() >= 2 && b.total() > 0 })

	code, out := sentryCmd(t, "admin", "-addr", admin, "backend", "drain", "web", a.addr)
	answered := time.Now()
	if code != 0 {
		t.Fatalf("sentry admin: exit %d\n%s", code, out)
	}
	var ans struct {
		Backends []struct {
			State    string
			Inflight int64
		}
	}
	if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.Backends) != 1 || ans.Backends[0].State != "draining" {
		t.Fatalf("the drain's answer: %v\n%s", err, out)
	}
	inflightAtDrain := ans.Backends[0].Inflight
	if inflightAtDrain == 0 {
		t.Fatalf("nothing in flight to a at the drain; the test proves nothing:\n%s", out)
	}

	// The requests in flight to a finish; nothing new reaches it.
	waitFor(t, 10*time.Second, "a drained", func() bool {
		return scrape(t, admin)[`sentry_backend_inflight{app="web",backend="`+a.addr+`"}`] == 0 && a.inflight.Load() == 0
	})
	drainedAt := time.Now()
	bBefore := b.total()
	time.Sleep(time.Second) // a second more of load, which b alone takes
	if n := a.arrivedAfter(drainedAt); n != 0 {
		t.Errorf("%d requests reached a after it was drained", n)
	}
	if n := int64(a.arrivedAfter(answered)); n > inflightAtDrain {
		t.Errorf("%d requests reached a after the drain answered; at most the %d sentry had in flight to it then may", n, inflightAtDrain)
	}
	if b.total()-bBefore < 10 {
		t.Errorf("b took %d requests in the second after the drain", b.total()-bBefore)
	}
	if int(a.done.Load()) != a.total() {
		t.Errorf("a answered %d of the %d requests it got", a.done.Load(), a.total())
	}
	waitFor(t, 5*time.Second, "sentry's connections to a closed", func() bool { return a.conns.Load() == 0 })

	m := scrape(t, admin)
	if m[`sentry_backend_state{app="web",backend="`+a.addr+`",state="draining"}`] != 1 {
		t.Error("sentry_backend_state does not say draining")
	}
	_, config := get(t, "http://"+admin+"/config")
	if !strings.Contains(config, "x-runtime-overrides:") || !strings.Contains(config, "backend: "+a.addr) || !strings.Contains(config, "value: draining") {
		t.Errorf("/config does not show the drain:\n%s", config)
	}
	// /config is a valid policy: the real binary checks it.
	if code, out := sentryCmd(t, "check", "-config", writeFile(t, "config.yaml", config)); code != 0 {
		t.Errorf("sentry check of /config: exit %d\n%s", code, out)
	}

	// A reload ends the drain: a takes requests again.
	if code, out := sentryCmd(t, "reload", "-config", cfg, "-pid", strconv.Itoa(p.cmd.Process.Pid)); code != 0 {
		t.Fatalf("sentry reload: exit %d\n%s", code, out)
	}
	reloaded := time.Now()
	waitFor(t, 5*time.Second, "a back after the reload", func() bool { return a.arrivedAfter(reloaded) > 0 })
	load.stop()
	load.check(t)
	t.Log(load)
	logs := regexp.MustCompile(` pid=\d+`).ReplaceAllString(p.out.String(), "")
	for _, want := range []string{
		"runtime override: backend state: app=web backend=" + a.addr + " from=enabled to=draining by=127.0.0.1:",
		"backend drained: app=web backend=" + a.addr,
		"runtime override reverted: backend state: app=web backend=" + a.addr + " from=draining to=enabled by=reload",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	if _, config := get(t, "http://"+admin+"/config"); strings.Contains(config, "x-runtime-overrides") {
		t.Errorf("/config still shows overrides after the reload")
	}
}
