package admission

import (
	"bytes"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync"
)

// UsableCPUs is the number of CPUs this process may use, for CPU
// utilisation: GOMAXPROCS, or the cgroup's CPU quota when that is
// smaller. A quota may be fractional (cpu.max "150000 100000" is 1.5
// CPUs): Go rounds GOMAXPROCS up to 2 there, and utilisation against 2
// would read a saturated sentry as 75% busy. Decision: the quota is read
// once, at the first call (a quota changed at run time is followed by
// GOMAXPROCS only); only cgroup v2 (cpu.max) is read — under cgroup v1 or
// with no quota it is GOMAXPROCS.
func UsableCPUs() float64 { return usableCPUs(runtime.GOMAXPROCS(0), cgroupQuota()) }

// usableCPUs is UsableCPUs for gomaxprocs and a quota (0: none).
func usableCPUs(gomaxprocs int, quota float64) float64 {
	n := float64(gomaxprocs)
	if quota > 0 && quota < n {
		return quota
	}
	return n
}

var cgroupQuota = sync.OnceValue(func() float64 { return CgroupCPUQuota("/", os.ReadFile) })

// CgroupCPUQuota returns the CPU quota of this process's cgroup v2, in
// CPUs (quota/period of cpu.max, the smallest along the path up to the
// root, as the kernel enforces every level), or 0 when there is none.
// root is the file system root ("/"; tests pass a fake tree), read reads
// a file.
func CgroupCPUQuota(root string, read func(string) ([]byte, error)) float64 {
	self, err := read(path.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0
	}
	var rel string
	for _, line := range bytes.Split(self, []byte("\n")) {
		// cgroup v2: "0::/some/path".
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			rel = string(bytes.TrimSpace(p))
			break
		}
	}
	if rel == "" {
		return 0
	}
	best := 0.0
	for dir := path.Clean("/" + rel); ; dir = path.Dir(dir) {
		if q := parseCPUMax(read, path.Join(root, "sys/fs/cgroup", dir, "cpu.max")); q > 0 && (best == 0 || q < best) {
			best = q
		}
		if dir == "/" {
			break
		}
	}
	return best
}

// parseCPUMax reads a cpu.max file ("max 100000" or "150000 100000") and
// returns quota/period in CPUs, 0 for none or an unreadable file.
func parseCPUMax(read func(string) ([]byte, error), file string) float64 {
	b, err := read(file)
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) != 2 || string(f[0]) == "max" {
		return 0
	}
	quota, err1 := strconv.ParseFloat(string(f[0]), 64)
	period, err2 := strconv.ParseFloat(string(f[1]), 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0
	}
	return quota / period
}
