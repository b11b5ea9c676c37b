package thresholdac

import _ "unsafe" // for go:linkname

// cheaprand is the runtime's per-thread wyrand (runtime.cheaprand): about a
// nanosecond, no shared writes, not cryptographic, which is all a Bernoulli
// admission draw needs. The runtime keeps this symbol linkable on purpose
// ("Do not remove or change the type signature", go.dev/issue/67401).
// math/rand/v2's Uint64 (runtime chacha8) measured 15–40 ns per decision on
// the 2-core build machine, over the 25 ns budget; it remains available
// through Config.Rand.
//
//go:linkname cheaprand runtime.cheaprand
func cheaprand() uint32
