package fairshare

import _ "unsafe" // for go:linkname

// cheaprand is the runtime's per-thread wyrand, as thresholdac uses it for
// its draw: about a nanosecond, no shared writes, not cryptographic, which
// is all the marginal client's draw needs.
//
//go:linkname cheaprand runtime.cheaprand
func cheaprand() uint32
