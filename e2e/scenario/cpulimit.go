package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// cpuLimit is a CPU cgroup holding one process to a share of a core: the
// CFS quota, which makes a process CPU-bound at a chosen rate without a
// core of its own. On a machine with fewer cores than sentries plus load
// generator, pinning cannot make each sentry the limit; a quota can.
type cpuLimit struct{ dir string }

// limitCPU moves pid into a new cgroup allowed cores CPUs (e.g. 0.25: a
// quarter of one core per 100 ms period). It uses cgroup v2's cpu.max
// where the unified hierarchy has the cpu controller, else v1's
// cpu.cfs_quota_us; it needs write access to the hierarchy (root).
func limitCPU(pid int, cores float64, name string) (*cpuLimit, error) {
	if cores <= 0 {
		return nil, errors.New("cpu limit: cores must be > 0")
	}
	const period = 100000 // µs
	quota := int(cores * period)
	dir, files := "", [][2]string{}
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && containsWord(string(b), "cpu") {
		dir = filepath.Join("/sys/fs/cgroup", name)
		files = [][2]string{{"cpu.max", fmt.Sprintf("%d %d", quota, period)}}
	} else if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup/cpu", name)
		files = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(period)}, {"cpu.cfs_quota_us", strconv.Itoa(quota)}}
	} else {
		return nil, errors.New("cpu limit: no writable cgroup cpu controller")
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("cpu limit: %w", err)
	}
	l := &cpuLimit{dir: dir}
	files = append(files, [2]string{"cgroup.procs", strconv.Itoa(pid)})
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			l.remove()
			return nil, fmt.Errorf("cpu limit: %s: %w", f[0], err)
		}
	}
	return l, nil
}

// remove deletes the cgroup once its process has exited (a cgroup with a
// live member cannot be removed), trying for up to 5 s.
func (l *cpuLimit) remove() {
	if l == nil {
		return
	}
	for i := 0; i < 50; i++ {
		if err := os.Remove(l.dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func containsWord(s, w string) bool {
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' || s[i] == '\n' {
			if start >= 0 && s[start:i] == w {
				return true
			}
			start = -1
		} else if start < 0 {
			start = i
		}
	}
	return false
}
