//go:build !unix

package admission

import "time"

// ProcessCPUTime returns ErrCPUUnsupported: this platform has no getrusage.
// Auto mode then stays in batch mode (the sampler logs the error).
func ProcessCPUTime() (time.Duration, error) { return 0, ErrCPUUnsupported }
