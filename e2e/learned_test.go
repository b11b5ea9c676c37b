package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
)

// classLoad sends GETs to path from workers goroutines, each pausing
// pause between requests, until stop is closed; it counts statuses.
type classLoad struct {
	codes sync.Map // int → *atomic.Int64
	wg    sync.WaitGroup
}

func runClassLoad(base, path string, workers int, pause time.Duration, stop <-chan struct{}) *classLoad {
	l := &classLoad{}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
				code := 0
				if resp, err := client.Get(base + path); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				v, _ := l.codes.LoadOrStore(code, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		}()
	}
	return l
}

func (l *classLoad) count(code int) int64 {
	if v, ok := l.codes.Load(code); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (l *classLoad) String() string {
	var parts []string
	l.codes.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%v:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	return strings.Join(parts, " ")
}

// learnedMetrics are the series that show what a process has learned.
type learnedMetrics struct {
	P, goldS, goldRate, keys, restored float64
}

func readLearned(t *testing.T, admin, source string) learnedMetrics {
	m := scrape(t, admin)
	return learnedMetrics{
		P:        m[`sentry_batch_parallelism{app="shop"}`],
		goldS:    m[`sentry_estimator_service_time_seconds{app="shop",class="gold"}`],
		goldRate: m[`sentry_estimator_arrival_rate{app="shop",class="gold"}`],
		keys:     m[`sentry_estimator_keys{app="shop"}`],
		restored: m[fmt.Sprintf(`sentry_learned_state_restored_apps{source="%s"}`, source)],
	}
}

// lastUpgrade reads the admin listener's /last-upgrade.
func lastUpgrade(t *testing.T, admin string) (r struct {
	PID, Parent int
	State       string
	Error       string
	Learned     struct {
		Source        string
		Apps, Ignored int
	}
}) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/last-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestUpgradeKeepsLearnedState: under an overload that makes sentry learn
// (a farm of 4 slots at 20 ms, gold and a flood of bronze, batch
// admission learning P), `sentry upgrade` starts the new binary, which
// gets the old one's learned state over the handover socket: from its
// first scrape it has the learned P, gold's service time and arrival rate
// and the key table, not the defaults a cold start has (P = 1, no
// estimate), and gold keeps being served. Then a stop writes the state
// file and a restart reads it; and an upgrade whose new process fails
// reports the new process's own reason through `sentry upgrade`.
func TestUpgradeKeepsLearnedState(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end upgrade test")
	}
	f, err := farm.Start(farm.Config{Servers: 1, Slots: 4, Seed: 29,
		Routes: []farm.Route{{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Fixed, Mean: 20 * time.Millisecond}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	admin, listen := freePort(t), freePort(t)
	state := filepath.Join(t.TempDir(), "state.json")
	policy := fmt.Sprintf(`
admin:
  listen: %s
server:
  shutdown_timeout: 5s
apps:
  - name: shop
    listen: %s
    backends:
      static: [%s]
    classes:
      - name: gold
        period: 0s
        rules: [{path_prefix: /checkout}]
      - name: bronze
        period: 100ms
        default: true
    sla:
      percentile: 95
      targets: [{target: 300ms}]
    admission:
      mode: batch
`, admin, listen, f.Addrs()[0])
	cfg := writeFile(t, "sentry.yaml", policy)
	dir := t.TempDir()
	r := &upgradeRig{t: t, bin: filepath.Join(dir, "sentry"), pidfile: filepath.Join(dir, "sentry.pid"), admin: admin, out: newSyncBuffer()}
	r.install(sentryBin)
	r.first = exec.Command(r.bin, "run", "-config", cfg, "-pidfile", r.pidfile, "-upgrade-timeout", "10s", "-state-file", state)
	r.first.Stdout, r.first.Stderr = r.out, r.out
	if err := r.first.Start(); err != nil {
		t.Fatal(err)
	}
	go r.first.Wait()
	t.Cleanup(func() {
		if pid := r.pid(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		r.first.Process.Kill()
		if t.Failed() {
			t.Logf("sentry output:\n%s", r.out.String())
		}
	})
	waitHTTP(t, "http://"+admin+"/readyz", 10*time.Second)

	// A cold process: nothing learned.
	cold := readLearned(t, admin, "handover")
	if cold.P != 1 || cold.goldS != 0 {
		t.Fatalf("a cold start has P %v and gold S %v; the test assumes 1 and 0", cold.P, cold.goldS)
	}
	stop := make(chan struct{})
	gold := runClassLoad("http://"+listen, "/checkout/pay", 2, 20*time.Millisecond, stop)
	bronze := runClassLoad("http://"+listen, "/browse/item", 24, 10*time.Millisecond, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		gold.wg.Wait()
		bronze.wg.Wait()
	}()
	// Learn: until P has moved well off 1 (at most 20 s).
	var before learnedMetrics
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		before = readLearned(t, admin, "handover")
		if before.P >= 2 && before.goldS > 0 && before.goldRate > 0 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("nothing learned in 20 s: %+v (gold %s, bronze %s)", before, gold, bronze)
		}
	}
	t.Logf("old process learned: %+v", before)

	oldPID := r.pid()
	up := exec.Command(sentryBin, "upgrade", "-pidfile", r.pidfile, "-timeout", "30s")
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("sentry upgrade: %v\n%s", err, out)
	}
	newPID := r.pid()
	t.Logf("sentry upgrade: %s", strings.TrimSpace(string(out)))
	if newPID == oldPID || !strings.Contains(string(out), fmt.Sprintf("PID %d replaced PID %d and is ready; learned state: handover (1 apps, 0 items left out)", newPID, oldPID)) {
		t.Errorf("sentry upgrade said %q (old %d, new %d)", out, oldPID, newPID)
	}
	// The first scrape the new process answers.
	var after learnedMetrics
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if lu := lastUpgrade(t, admin); lu.PID == newPID {
			after = readLearned(t, admin, "handover")
			if lu.Parent != oldPID || lu.Learned.Source != "handover" || lu.Learned.Apps != 1 {
				t.Errorf("the new process's /last-upgrade: %+v", lu)
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the new process never answered on the admin port")
		}
	}
	t.Logf("new process at its first scrape: %+v", after)
	near := func(a, b float64) bool { return a > 0 && b > 0 && a/b < 1.5 && b/a < 1.5 }
	if after.restored != 1 || after.P < 1.5 || !near(after.P, before.P) || !near(after.goldS, before.goldS) || after.goldRate <= 0 || after.keys < 2 {
		t.Errorf("the new process did not start with the old one's learned state:\nbefore %+v\nafter  %+v", before, after)
	}
	// While the old process drains, the new one counts its requests in
	// flight as load; once it has exited, none.
	var peer []float64
	for alive(oldPID) {
		peer = append(peer, scrape(t, admin)[`sentry_upgrade_peer_in_flight{app="shop"}`])
		if len(peer) > 2000 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitExit(t, oldPID, 10*time.Second)
	t.Logf("the old process's requests in flight as the new one saw them while it drained: %v", peer)
	if slices.Max(append(peer, 0)) == 0 {
		t.Errorf("the new process never counted the old one's requests in flight")
	}
	if v := waitPeerGone(t, admin); v != 0 {
		t.Errorf("the upgrade peer's requests in flight still counted (%v) after the old process exited", v)
	}
	gold200 := gold.count(200)
	time.Sleep(time.Second)
	if gold.count(200) == gold200 {
		t.Errorf("gold not served after the upgrade: %s", gold)
	}

	// A stop writes the state file; a restart reads it.
	close(stop)
	gold.wg.Wait()
	bronze.wg.Wait()
	last := readLearned(t, admin, "handover")
	syscall.Kill(newPID, syscall.SIGTERM)
	waitExit(t, newPID, 10*time.Second)
	if fi, err := os.Stat(state); err != nil || fi.Size() == 0 {
		t.Fatalf("no state file after the stop: %v", err)
	}
	restart := exec.Command(r.bin, "run", "-config", cfg, "-pidfile", r.pidfile, "-state-file", state)
	restart.Stdout, restart.Stderr = r.out, r.out
	if err := restart.Start(); err != nil {
		t.Fatal(err)
	}
	defer restart.Process.Kill()
	go restart.Wait()
	waitHTTP(t, "http://"+admin+"/readyz", 10*time.Second)
	fromFile := readLearned(t, admin, "state_file")
	t.Logf("restart with the state file: %+v", fromFile)
	if fromFile.restored != 1 || !near(fromFile.P, last.P) || !near(fromFile.goldS, last.goldS) || fromFile.keys < 2 {
		t.Errorf("the restart did not read the state file:\nat the stop %+v\nrestarted   %+v", last, fromFile)
	}

	// An upgrade whose new process fails after the policy check passed
	// (an access log it cannot open): `sentry upgrade` prints the new
	// process's own reason and exits 1; the old one keeps serving.
	pid := restart.Process.Pid
	bad := strings.Replace(policy, "server:\n", "log:\n  access: {enabled: true, output: "+filepath.Join(t.TempDir(), "missing", "access.log")+"}\nserver:\n", 1)
	os.WriteFile(cfg, []byte(bad), 0o644)
	if out, err := exec.Command(sentryBin, "check", "-config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("the failing policy must pass sentry check: %v\n%s", err, out)
	}
	out, err = exec.Command(sentryBin, "upgrade", "-pidfile", r.pidfile, "-timeout", "30s").CombinedOutput()
	t.Logf("failed upgrade: %s", strings.TrimSpace(string(out)))
	if err == nil || !strings.Contains(string(out), "log.access") || !strings.Contains(string(out), "the new process failed; PID") {
		t.Errorf("sentry upgrade with a failing new process: %v\n%s", err, out)
	}
	if r.pid() != pid || !alive(pid) {
		t.Errorf("the old process did not keep serving")
	}
}

// waitPeerGone waits up to 2 s for sentry_upgrade_peer_in_flight to be 0
// and returns its last value.
func waitPeerGone(t *testing.T, admin string) float64 {
	var v float64
	for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(10 * time.Millisecond) {
		if v = scrape(t, admin)[`sentry_upgrade_peer_in_flight{app="shop"}`]; v == 0 {
			return 0
		}
	}
	return v
}
