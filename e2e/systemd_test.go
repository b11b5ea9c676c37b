package e2e

import (
	"net"
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

// unitExecReload returns the systemd unit's ExecReload command with the
// unit's paths replaced by the test's.
func unitExecReload(t *testing.T, config, pidfile string) []string {
	t.Helper()
	b, err := os.ReadFile("../deploy/systemd/sentry.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecReload="); ok {
			cmd = strings.NewReplacer("/usr/local/bin/sentry", sentryBin,
				"/etc/sentry/sentry.yaml", config, "/run/sentry/sentry.pid", pidfile).Replace(cmd)
			return strings.Fields(cmd)
		}
	}
	t.Fatal("the unit has no ExecReload")
	return nil
}

// TestReloadCommandTellsTheTruth runs the unit's ExecReload line against a
// running sentry: a valid change exits 0 and is applied; a file that does
// not validate exits 1 before anything is signalled; a policy that
// validates but that the running process refuses (its new listener's port
// is taken) exits 1 too, printing the running process's reason, and the
// old policy keeps serving.
func TestReloadCommandTellsTheTruth(t *testing.T) {
	b1 := newTestBackend(t, "b1", 0)
	b2 := newTestBackend(t, "b2", 0)
	pol := reloadPolicy{admin: freePort(t), listen: freePort(t), backends: []string{b1.addr}}
	cfg := writeFile(t, "sentry.yaml", pol.yaml())
	pidfile := filepath.Join(t.TempDir(), "sentry.pid")
	startSentry(t, "http://"+pol.admin+"/readyz", "run", "-config", cfg, "-pidfile", pidfile)
	reload := func() (int, string) {
		argv := unitExecReload(t, cfg, pidfile)
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}

	q := pol
	q.backends = []string{b1.addr, b2.addr}
	rewrite(t, cfg, q.yaml())
	if code, out := reload(); code != 0 {
		t.Fatalf("a valid change: exit %d\n%s", code, out)
	}
	// Applied by the time the command returned.
	if v := scrape(t, pol.admin)[`sentry_backend_healthy{app="web",backend="`+b2.addr+`"}`]; v != 1 {
		t.Errorf("after reload exited 0, b2 is not in the pool (%v)", v)
	}

	rewrite(t, cfg, q.yaml()+"  - bogus\n")
	if code, out := reload(); code != 1 || !strings.Contains(out, "invalid") {
		t.Errorf("an invalid file: exit %d, want 1\n%s", code, out)
	}
	if v := scrape(t, pol.admin)[`sentry_policy_reloads_total{result="error"}`]; v != 0 {
		t.Errorf("an invalid file was signalled: %v reload errors", v)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	r := q
	r.listen2, r.api = taken.Addr().String(), true
	rewrite(t, cfg, r.yaml())
	// ... and says why, from the running process's /last-reload.
	if code, out := reload(); code != 1 || !strings.Contains(out, "refused") ||
		!strings.Contains(out, "listen "+taken.Addr().String()) || !strings.Contains(out, "address already in use") {
		t.Errorf("a policy the running process refuses: exit %d, want 1 and the reason\n%s", code, out)
	}
	if code, _ := get(t, "http://"+pol.listen+"/"); code != 200 {
		t.Errorf("after the refused reload: %d", code)
	}
}

// TestSdNotifyReady: started with NOTIFY_SOCKET, sentry sends READY=1 with
// its MAINPID once its listeners answer, and STOPPING=1 on SIGTERM.
func TestSdNotifyReady(t *testing.T) {
	b1 := newTestBackend(t, "b1", 0)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pol := reloadPolicy{admin: freePort(t), listen: freePort(t), backends: []string{b1.addr}}
	cfg := writeFile(t, "sentry.yaml", pol.yaml())
	cmd := exec.Command(sentryBin, "run", "-config", cfg)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	out := newSyncBuffer()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	read := func() string {
		buf := make([]byte, 512)
		_ = ln.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, out.String())
		}
		return string(buf[:n])
	}
	if got, want := read(), "READY=1\nMAINPID="+strconv.Itoa(cmd.Process.Pid); got != want {
		t.Fatalf("notification %q, want %q", got, want)
	}
	// READY means serving.
	if code, _ := get(t, "http://"+pol.listen+"/"); code != 200 {
		t.Errorf("after READY=1: %d", code)
	}
	cmd.Process.Signal(os.Interrupt)
	if got := read(); got != "STOPPING=1" {
		t.Errorf("on SIGINT: %q, want STOPPING=1", got)
	}
	cmd.Wait()
}

// TestSIGQUITDrains: SIGQUIT is a graceful stop, as nginx has it (Go's
// default is a goroutine dump and exit 2 with no drain): a request in
// flight is answered, the process exits 0 and removes its PID file.
func TestSIGQUITDrains(t *testing.T) {
	slow := newTestBackend(t, "slow", 500*time.Millisecond)
	pol := reloadPolicy{admin: freePort(t), listen: freePort(t), backends: []string{slow.addr}}
	cfg := writeFile(t, "sentry.yaml", pol.yaml())
	pidfile := filepath.Join(t.TempDir(), "sentry.pid")
	p := startSentry(t, "http://"+pol.admin+"/readyz", "run", "-config", cfg, "-pidfile", pidfile)
	type answer struct {
		code int
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + pol.listen + "/")
		if err != nil {
			got <- answer{0, err}
			return
		}
		resp.Body.Close()
		got <- answer{resp.StatusCode, nil}
	}()
	for start := time.Now(); slow.inflight.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the request never reached the backend")
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a.err != nil || a.code != 200 {
		t.Errorf("the request in flight at SIGQUIT: %d %v", a.code, a.err)
	}
	err := p.cmd.Wait()
	out := p.out.String()
	if err != nil || strings.Contains(out, "goroutine ") || !strings.Contains(out, "signal=quit") {
		t.Errorf("exit after SIGQUIT: %v\n%s", err, out)
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("PID file left: %v", err)
	}
}
