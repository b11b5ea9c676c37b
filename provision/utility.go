package provision

// AppUtility is what the greedy allocation knows of one app (eq. 10–11).
type AppUtility struct {
	Name       string
	Current    int     // servers it has now
	LambdaIn   float64 // λ_in, 1/s
	LambdaPred float64 // λ_pred, 1/s
	Revenue    float64 // r, revenue per admitted request
	TProv      float64 // T_prov, the length of a provisioning cycle, s
	Max        int     // ceiling on its servers; ≤ 0: none
}

// Utility is U(a, n) = min(n·λ_in, λ_pred)·r·T_prov: eq. 10 within the range
// of eq. 11 (n·λ_in ≤ λ_pred) and flat beyond it, since servers past the
// predicted demand earn nothing (doc.go, "Utility").
func (a AppUtility) Utility(n int) float64 {
	if n <= 0 {
		return 0
	}
	return min(float64(n)*a.LambdaIn, a.LambdaPred) * a.Revenue * a.TProv
}

// Gain is the revenue gain of server n+1: U(a, n+1) − U(a, n).
func (a AppUtility) Gain(n int) float64 {
	if a.Max > 0 && n >= a.Max {
		return 0
	}
	return a.Utility(n+1) - a.Utility(n)
}

// Allocate hands out spare servers greedily (Cataclysm §4.1): each step
// gives one server to the app with the largest positive gain that is below
// its ceiling; ties go to the app first in apps. It stops when the spares
// run out, every app is at its ceiling, or no app gains. The result is the
// number of extra servers per app, in apps' order. With linear utility
// curves the greedy answer is optimal.
func Allocate(apps []AppUtility, spare int) []int {
	extra := make([]int, len(apps))
	for ; spare > 0; spare-- {
		best, bestGain := -1, 0.0
		for i, a := range apps {
			if g := a.Gain(a.Current + extra[i]); g > bestGain {
				best, bestGain = i, g
			}
		}
		if best < 0 {
			break
		}
		extra[best]++
	}
	return extra
}
