package scenario

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLimitCPU: a process moved into the cgroup is listed there with the
// quota asked for, and the cgroup is gone after the process ends.
func TestLimitCPU(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer cmd.Process.Kill()
	l, err := limitCPU(cmd.Process.Pid, 0.25, "sentry-scenario-test-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err != nil {
		t.Skip("no writable cgroup here:", err)
	}
	procs, err := os.ReadFile(filepath.Join(l.dir, "cgroup.procs"))
	if err != nil || strings.TrimSpace(string(procs)) != itoa(cmd.Process.Pid) {
		t.Errorf("cgroup.procs = %q (%v), want %d", procs, err, cmd.Process.Pid)
	}
	quota, _ := os.ReadFile(filepath.Join(l.dir, "cpu.cfs_quota_us"))
	if max, err := os.ReadFile(filepath.Join(l.dir, "cpu.max")); err == nil {
		quota = max
	}
	if !strings.HasPrefix(strings.TrimSpace(string(quota)), "25000") {
		t.Errorf("quota %q, want 25000 µs per 100000", quota)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l.remove()
	if _, err := os.Stat(l.dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind: %v", l.dir, err)
	}
	if !containsWord("cpuset cpu io", "cpu") || containsWord("cpuset io", "cpu") {
		t.Error("containsWord")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
