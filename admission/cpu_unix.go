//go:build unix

package admission

import (
	"syscall"
	"time"
)

// ProcessCPUTime returns the user plus system CPU time consumed by this
// process so far (getrusage RUSAGE_SELF), including every thread.
func ProcessCPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
