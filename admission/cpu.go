package admission

import (
	"errors"
	"time"
)

// ErrCPUUnsupported is returned by ProcessCPUTime where the platform has no
// getrusage.
var ErrCPUUnsupported = errors.New("admission: process CPU time is not available on this platform")

// CPUMeter turns successive readings of the process's CPU time into
// utilisation: ΔCPU / (Δwall × procs), where procs is the CPUs the
// process may use (UsableCPUs: GOMAXPROCS, or the cgroup's CPU quota when
// it is smaller, fractions included). The value is not clamped at 1: threads
// outside GOMAXPROCS (syscalls, cgo) can push it slightly above, and
// clamping would hide that. It is never negative.
//
// A CPUMeter is owned by one goroutine (the sampler); it is not safe for
// concurrent use.
type CPUMeter struct {
	read     func() (time.Duration, error)
	procs    func() float64
	lastCPU  time.Duration
	lastWall time.Time
	primed   bool
}

// NewCPUMeter returns a meter reading CPU time with read and the CPU count
// with procs. Nil read means ProcessCPUTime; nil procs means UsableCPUs,
// read at every sample.
func NewCPUMeter(read func() (time.Duration, error), procs func() int) *CPUMeter {
	if read == nil {
		read = ProcessCPUTime
	}
	m := &CPUMeter{read: read, procs: UsableCPUs}
	if procs != nil {
		m.procs = func() float64 { return float64(procs()) }
	}
	return m
}

// Sample reads the CPU time at wall time now and returns the utilisation
// since the previous successful Sample. ok is false on the first call
// (which only primes the meter) and when now is not after the previous
// sample. After an error the previous reading is kept, so the next success
// averages over the whole gap.
func (m *CPUMeter) Sample(now time.Time) (util float64, ok bool, err error) {
	cpu, err := m.read()
	if err != nil {
		return 0, false, err
	}
	if !m.primed {
		m.lastCPU, m.lastWall, m.primed = cpu, now, true
		return 0, false, nil
	}
	wall := now.Sub(m.lastWall)
	if wall <= 0 {
		return 0, false, nil
	}
	used := cpu - m.lastCPU
	m.lastCPU, m.lastWall = cpu, now
	procs := m.procs()
	if !(procs > 0) {
		procs = 1
	}
	if used < 0 {
		used = 0
	}
	return used.Seconds() / (wall.Seconds() * procs), true, nil
}
