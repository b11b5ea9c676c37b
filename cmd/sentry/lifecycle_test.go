package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/sentry-proxy/sentry/policy"
)

// TestLastReload: /last-reload answers what the last reload did -- none,
// then the reasons of a refusal line by line, then a success -- with a
// sequence number a command can wait on.
func TestLastReload(t *testing.T) {
	be := backendServer(t, "one")
	admin, l1 := freeAddr(t), freeAddr(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	pol := func(listen string) string {
		return fmt.Sprintf("admin: {listen: %q}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n", admin, listen, be)
	}
	d := testDaemon(t, parse(t, pol(l1)))
	read := func() reloadReport {
		t.Helper()
		resp, err := http.Get("http://" + admin + "/last-reload")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r reloadReport
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := read(); r.Seq != 0 || r.Result != "none" || r.PID != os.Getpid() {
		t.Errorf("before any reload: %+v", r)
	}
	if err := d.reload(parse(t, pol("["+l1+", "+busy.Addr().String()+"]"))); err == nil {
		t.Fatal("a taken port was accepted")
	}
	if r := read(); r.Seq != 1 || r.Result != "error" || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], busy.Addr().String()) {
		t.Errorf("after a refusal: %+v", r)
	}
	d.mu.Lock()
	d.reloadFailed(parseErr(t, "apps:\n  - name: web\n    listen: 127.0.0.1:1\n    backends: {static: [127.0.0.1:2]}\n    bogus: 1\n    colour: red\n"))
	d.mu.Unlock()
	if r := read(); r.Seq != 2 || len(r.Errors) != 2 || !strings.Contains(r.Errors[0], `<test>:5:5: apps[0]: unknown key "bogus"`) {
		t.Errorf("policy errors, one per line with FILE:LINE:COLUMN: %+v", r)
	}
	if err := d.reload(parse(t, pol(l1))); err != nil {
		t.Fatal(err)
	}
	if r := read(); r.Seq != 3 || r.Result != "success" || len(r.Errors) != 0 {
		t.Errorf("after a success: %+v", r)
	}
	if resp, err := http.Get("http://" + admin + "/last-upgrade"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/last-upgrade: %v", err)
	} else {
		var u upgradeReport
		json.NewDecoder(resp.Body).Decode(&u)
		resp.Body.Close()
		if u.State != "none" || u.Learned.Source != "none" {
			t.Errorf("/last-upgrade of a process never upgraded: %+v", u)
		}
	}
}

func parseErr(t *testing.T, yaml string) error {
	t.Helper()
	_, err := policy.Parse("<test>", []byte(yaml))
	if err == nil {
		t.Fatal("no error")
	}
	return err
}

// TestRunFlags: `sentry upgrade` finds the policy of the running process
// in its command line, whichever form the flags took.
func TestRunFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want map[string]string
	}{
		{[]string{"sentry", "run", "-config", "/etc/s.yaml", "-pidfile", "/run/p"}, map[string]string{"config": "/etc/s.yaml"}},
		{[]string{"sentry", "run", "--config=s.yaml", "-watch", "10s"}, map[string]string{"config": "s.yaml"}},
		{[]string{"sentry", "run", "-listen", "a:1", "-backend", "b:2", "-admin", "off"}, map[string]string{"backend": "b:2", "admin": "off"}},
	} {
		got := runFlags(c.args)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%q: %v, want %v", c.args, got, c.want)
		}
	}
}

// TestUpgradeUsage: the command's flag errors exit 2.
func TestUpgradeUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-pid", "1", "-pidfile", "x"}, {"-pid", "1", "extra"}} {
		if code := cmdUpgrade(args); code != 2 {
			t.Errorf("sentry upgrade %q: exit %d, want 2", args, code)
		}
	}
	if code := cmdUpgrade([]string{"-pidfile", "/nonexistent/pid"}); code != 1 {
		t.Errorf("a missing PID file: exit %d, want 1", code)
	}
}
