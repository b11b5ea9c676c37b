package thresholdac

import "math"

// Pair is a threshold pair (i, p) of Cataclysm §3.3: classes more important
// than Class are admitted, Class itself is admitted with probability P, and
// less important classes are rejected. When All is set every class fits the
// capacity: Class is then len(work) and P is 1.
type Pair struct {
	// Class is the threshold class i (0 is the most important).
	Class int
	// P is the ADMIT probability of class i, in [0, 1). (The paper calls
	// it p_drop but uses it as the admit fraction; see docs/algorithms.md §3.)
	P float64
	// All is true when every class fits: Σ_j λ_j·s_j ≤ K.
	All bool
}

// Compute returns the threshold pair for capacity k and per-class offered
// work work[j] = λ_j·s_j, both in server-seconds per second, classes in
// importance order (index 0 first). It is the paper's rule with p as the
// admit probability:
//
//	Σ_{j<i} work_j ≤ k  and  Σ_{j≤i} work_j > k   ⇒   p = (k − Σ_{j<i} work_j) / work_i
//
// and Pair{All: true} when Σ_j work_j ≤ k. Entries that are negative or NaN
// count as zero; +Inf is allowed and gives p = 0 for its class. A k that is
// zero, negative or NaN admits nothing from the first class with work.
// Compute does not allocate.
func Compute(k float64, work []float64) Pair {
	if math.IsNaN(k) {
		k = 0
	}
	var prev float64 // Σ_{j<i} work_j; prev ≤ k holds at the top of each iteration
	for i, w := range work {
		if !(w > 0) { // negative, zero or NaN
			continue
		}
		if prev+w > k {
			p := (k - prev) / w
			if !(p > 0) { // k ≤ prev can only happen when k < 0; also catches NaN
				p = 0
			}
			if p >= 1 { // rounding guard: prev+w > k implies p < 1 in exact arithmetic
				p = math.Nextafter(1, 0)
			}
			return Pair{Class: i, P: p}
		}
		prev += w
	}
	return Pair{Class: len(work), P: 1, All: true}
}
