package e2e

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The upgrade tests run sentry from a copy of the binary at a path they can
// replace: tableflip starts the new process from os.Args[0] (exec.LookPath,
// then fork/exec in the first process's working directory), so what sits at
// that path when SIGUSR2 arrives is what runs next.

// upgradeRig is a sentry started from a replaceable binary with a PID file.
type upgradeRig struct {
	t       *testing.T
	bin     string // the path sentry runs from
	pidfile string
	admin   string
	first   *exec.Cmd
	out     *syncBuffer
}

func startUpgradable(t *testing.T, admin, cfg string) *upgradeRig {
	t.Helper()
	dir := t.TempDir()
	r := &upgradeRig{t: t, bin: filepath.Join(dir, "sentry"), pidfile: filepath.Join(dir, "sentry.pid"), admin: admin, out: newSyncBuffer()}
	r.install(sentryBin)
	r.first = exec.Command(r.bin, "run", "-config", cfg, "-pidfile", r.pidfile, "-upgrade-timeout", "10s")
	r.first.Stdout, r.first.Stderr = r.out, r.out
	if err := r.first.Start(); err != nil {
		t.Fatal(err)
	}
	go r.first.Wait() // reap it whenever it exits; later processes are not our children
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
	if r.pid() != r.first.Process.Pid {
		t.Fatalf("pid file says %d, process is %d", r.pid(), r.first.Process.Pid)
	}
	return r
}

// install puts the file src at the binary path atomically (copy, rename),
// the way an operator replaces a binary that is running.
func (r *upgradeRig) install(src string) {
	r.t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		r.t.Fatal(err)
	}
	tmp := r.bin + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, r.bin); err != nil {
		r.t.Fatal(err)
	}
}

func (r *upgradeRig) pid() int {
	b, err := os.ReadFile(r.pidfile)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(string(bytes.TrimSpace(b)))
	return n
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// upgrade sends SIGUSR2 to the live process and waits for the PID file to
// name a new one. It returns the old and new PIDs and the handover time.
func (r *upgradeRig) upgrade() (oldPID, newPID int, took time.Duration) {
	r.t.Helper()
	oldPID = r.pid()
	start := time.Now()
	if err := syscall.Kill(oldPID, syscall.SIGUSR2); err != nil {
		r.t.Fatal(err)
	}
	for time.Since(start) < 10*time.Second {
		if p := r.pid(); p != oldPID && p > 0 {
			return oldPID, p, time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.t.Fatalf("no new process within 10s of SIGUSR2")
	return
}

// failedUpgrade sends SIGUSR2, expecting the new process to fail: the PID
// file keeps naming the old one, which keeps serving.
func (r *upgradeRig) failedUpgrade(wantFailures float64) time.Duration {
	r.t.Helper()
	pid := r.pid()
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		r.t.Fatal(err)
	}
	waitMetric(r.t, r.admin, "sentry_upgrade_failures_total", wantFailures, 10*time.Second)
	if p := r.pid(); p != pid {
		r.t.Fatalf("pid file changed to %d after a failed upgrade", p)
	}
	if !alive(pid) {
		r.t.Fatalf("the old process %d died", pid)
	}
	return time.Since(start)
}

// downloadH2 fetches /slow over TLS with h2 (the example certificate).
func downloadH2(addr string, chunks int, every time.Duration) (int64, time.Duration, error) {
	start := time.Now()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(fmt.Sprintf("https://%s/slow?chunks=%d&every=%s", addr, chunks, every))
	if err != nil {
		return 0, time.Since(start), err
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		return 0, time.Since(start), fmt.Errorf("spoke %s, not h2", resp.Proto)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != int64(chunks)*chunkSize {
		err = fmt.Errorf("got %d bytes, want %d", n, int64(chunks)*chunkSize)
	}
	return n, time.Since(start), err
}

func waitExit(t *testing.T, pid int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for alive(pid) {
		if time.Since(start) > within {
			t.Fatalf("process %d still running %v after the upgrade", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestUpgradeUnderLoad: under continuous load, two binary upgrades
// (SIGUSR2), each with a long download and an Upgrade tunnel open across it,
// then an upgrade to a binary that exits at once and one whose policy is
// invalid at that moment. No request may fail, no connection may be reset,
// the download and the tunnel must finish undisturbed on the old process,
// which must wait for them and then exit; the failed upgrades must leave the
// old process serving.
func TestUpgradeUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end upgrade test")
	}
	// A second build with another version string, so the metrics show
	// which binary is serving.
	next := filepath.Join(t.TempDir(), "sentry-next")
	build := exec.Command("go", "build", "-ldflags", "-X main.buildVersion=e2e-next", "-o", next, "../cmd/sentry")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	b1 := newTestBackend(t, "b1", time.Millisecond)
	b2 := newTestBackend(t, "b2", time.Millisecond)
	stream := newStreamBackend(t)
	admin, listen, listenTLS := freePort(t), freePort(t), freePort(t)
	cert, _ := filepath.Abs("../deploy/examples/tls/example-only-cert.pem")
	key, _ := filepath.Abs("../deploy/examples/tls/example-only-key.pem")
	policy := fmt.Sprintf(`
admin:
  listen: %s
server:
  shutdown_timeout: 10s
apps:
  - name: web
    listen: %s
    backends:
      static: [%s, %s]
  - name: stream
    listen: %s
    hosts: [stream.test]
    backends:
      static: [%s]
  - name: secure
    listen: %s
    tls: {cert: %s, key: %s}
    backends:
      static: [%s]
`, admin, listen, b1.addr, b2.addr, listen, stream, listenTLS, cert, key, stream)
	cfg := writeFile(t, "sentry.yaml", policy)
	r := startUpgradable(t, admin, cfg)
	buildInfo := func() string {
		for k := range scrape(t, admin) {
			if strings.HasPrefix(k, "sentry_build_info{") {
				return k
			}
		}
		return ""
	}
	firstVersion := buildInfo()

	g := startLoad("http://"+listen+"/", loadOpts{workers: 8, fresh: 2, rate: 2000, max: 200000, maxTime: 40 * time.Second})
	defer g.stop()
	time.Sleep(300 * time.Millisecond)

	for i, bin := range []string{next, sentryBin} {
		// A 2 s download and a 1.5 s tunnel, open across the upgrade.
		type result struct {
			n    int64
			took time.Duration
			err  error
			end  time.Time
		}
		dl := make(chan result, 1)
		tn := make(chan result, 1)
		go func() {
			n, took, err := download(listen, "stream.test", 40, 50*time.Millisecond)
			dl <- result{n, took, err, time.Now()}
		}()
		go func() {
			start := time.Now()
			n, err := tunnel(listen, "stream.test", 30, 50*time.Millisecond)
			tn <- result{int64(n), time.Since(start), err, time.Now()}
		}()
		// Over h2 (TLS), a download that outlasts fasthttp's five-second
		// cut of h2 connections in a shutdown; the first upgrade only.
		h2 := make(chan result, 1)
		if i == 0 {
			go func() {
				n, took, err := downloadH2(listenTLS, 110, 50*time.Millisecond)
				h2 <- result{n, took, err, time.Now()}
			}()
		} else {
			h2 <- result{}
		}
		time.Sleep(300 * time.Millisecond) // all are under way on the old process

		r.install(bin)
		oldPID, newPID, handover := r.upgrade()
		drained := waitExit(t, oldPID, 12*time.Second) // shutdown_timeout is 10s
		exited := time.Now()
		d, tu, hd := <-dl, <-tn, <-h2
		if i == 0 {
			t.Logf("upgrade %d: h2 download %d bytes in %v (%v)", i+1, hd.n, hd.took.Round(time.Millisecond), hd.err)
			if hd.err != nil {
				t.Errorf("upgrade %d: h2 download cut: %v", i+1, hd.err)
			}
			// hd.err covers a cut stream (a short body or a reset).
			// The client can read the last bytes after the old process
			// has exited (they are in the socket buffer by then), so
			// the order of the two clocks is logged, not asserted: on a
			// loaded CI machine it went either way with the download
			// whole.
			if exited.Before(hd.end) {
				t.Logf("upgrade %d: the client read the end of its h2 download %v after the old process exited", i+1, hd.end.Sub(exited).Round(time.Millisecond))
			}
		}
		t.Logf("upgrade %d: pid %d -> %d, new process ready %v after SIGUSR2; the old one drained for %v and exited %v after its download, %v after its tunnel ended",
			i+1, oldPID, newPID, handover.Round(time.Millisecond), (handover + drained).Round(time.Millisecond),
			exited.Sub(d.end).Round(time.Millisecond), exited.Sub(tu.end).Round(time.Millisecond))
		t.Logf("upgrade %d: download %d bytes in %v (%v); tunnel %d echoes in %v (%v)",
			i+1, d.n, d.took.Round(time.Millisecond), d.err, tu.n, tu.took.Round(time.Millisecond), tu.err)
		if d.err != nil {
			t.Errorf("upgrade %d: download cut: %v", i+1, d.err)
		}
		if tu.err != nil {
			t.Errorf("upgrade %d: tunnel cut: %v", i+1, tu.err)
		}
		if exited.Before(d.end) || exited.Before(tu.end) {
			t.Errorf("upgrade %d: the old process exited before its download or tunnel was done", i+1)
		}
		if v := buildInfo(); (bin == next) != strings.Contains(v, "e2e-next") {
			t.Errorf("upgrade %d: serving %s after installing %s", i+1, v, filepath.Base(bin))
		}
	}
	if v := buildInfo(); v != firstVersion {
		t.Errorf("after two upgrades: %s, want %s", v, firstVersion)
	}

	// A new binary that exits before it is ready.
	script := filepath.Join(t.TempDir(), "broken")
	os.WriteFile(script, []byte("#!/bin/sh\necho 'broken binary: exiting' >&2\nexit 1\n"), 0o755)
	r.install(script)
	took := r.failedUpgrade(1)
	t.Logf("broken binary: upgrade refused after %v; pid %d still serving", took.Round(time.Millisecond), r.pid())
	r.install(sentryBin)

	// A good binary with a policy that is invalid at the moment of upgrade.
	os.WriteFile(cfg, []byte(policy+"    bogus: true\n"), 0o644)
	took = r.failedUpgrade(2)
	t.Logf("invalid policy: upgrade refused after %v; pid %d still serving", took.Round(time.Millisecond), r.pid())
	os.WriteFile(cfg, []byte(strings.TrimLeft(policy, "\n")), 0o644)

	time.Sleep(300 * time.Millisecond)
	g.stop()
	t.Logf("load: %s", g)
	g.check(t)
	if g.freshOK.Load() == 0 {
		t.Errorf("no request on a fresh connection succeeded")
	}
	out := r.out.String()
	for _, want := range []string{"broken binary: exiting", "upgrade failed; this process keeps serving", "unknown key \"bogus\""} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}

	// SIGTERM stops the live process and removes its PID file.
	pid := r.pid()
	syscall.Kill(pid, syscall.SIGTERM)
	waitExit(t, pid, 10*time.Second)
	if _, err := os.Stat(r.pidfile); !os.IsNotExist(err) {
		t.Errorf("pid file left after SIGTERM: %v", err)
	}
}
