package admission

import (
	"io/fs"
	"math"
	"testing"
	"time"
)

// fakeFS is a file tree for CgroupCPUQuota.
type fakeFS map[string]string

func (f fakeFS) read(p string) ([]byte, error) {
	if s, ok := f[p]; ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}

func TestCgroupCPUQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   fakeFS
		want float64
	}{
		{"one CPU", fakeFS{
			"/proc/self/cgroup":                       "0::/kubepods/pod1/c1\n",
			"/sys/fs/cgroup/kubepods/pod1/c1/cpu.max": "100000 100000\n",
		}, 1},
		{"a fraction", fakeFS{
			"/proc/self/cgroup":          "0::/app\n",
			"/sys/fs/cgroup/app/cpu.max": "150000 100000\n",
		}, 1.5},
		{"no quota", fakeFS{
			"/proc/self/cgroup":          "0::/app\n",
			"/sys/fs/cgroup/app/cpu.max": "max 100000\n",
		}, 0},
		{"the parent's is smaller", fakeFS{
			"/proc/self/cgroup":            "0::/pod/c\n",
			"/sys/fs/cgroup/pod/c/cpu.max": "400000 100000\n",
			"/sys/fs/cgroup/pod/cpu.max":   "50000 100000\n",
		}, 0.5},
		{"cgroup v1 only", fakeFS{
			"/proc/self/cgroup": "12:cpu,cpuacct:/docker/abc\n",
		}, 0},
		{"garbage", fakeFS{
			"/proc/self/cgroup":          "0::/app\n",
			"/sys/fs/cgroup/app/cpu.max": "lots\n",
		}, 0},
		{"no proc", fakeFS{}, 0},
	} {
		if got := CgroupCPUQuota("/", tc.fs.read); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v CPUs, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCPUMeterAgainstQuota: a process limited to 1 CPU on a 2-core machine
// that burns one CPU-second per second is 100% busy, not 50%.
func TestCPUMeterAgainstQuota(t *testing.T) {
	var cpu time.Duration
	limit := CgroupCPUQuota("/", fakeFS{
		"/proc/self/cgroup":          "0::/box\n",
		"/sys/fs/cgroup/box/cpu.max": "100000 100000\n",
	}.read)
	m := NewCPUMeter(func() (time.Duration, error) { return cpu, nil }, nil)
	m.procs = func() float64 { return usableCPUs(2, limit) } // UsableCPUs on a 2-core machine
	t0 := time.Unix(100, 0)
	m.Sample(t0)
	cpu += time.Second
	u, ok, err := m.Sample(t0.Add(time.Second))
	if !ok || err != nil || math.Abs(u-1) > 1e-9 {
		t.Fatalf("utilisation %v (ok %v, %v), want 1.0 against a 1-CPU quota", u, ok, err)
	}
}
