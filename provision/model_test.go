package provision

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func near(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.9g, want %.9g (±%g)", what, got, want, rel)
	}
}

// M/M/1: E[R] = 1/(μ − λ), so the rate that keeps E[R] = R is μ − 1/R.
// E[S] = 10 ms (μ = 100/s), R = 50 ms: λ_in = 100 − 20 = 80/s. The inputs
// are what the sentry would measure at 60/s: σ_a² = 1/60², σ_b² = E[S]².
func TestMM1(t *testing.T) {
	in := Inputs{MeanS: 0.010, VarS: 0.010 * 0.010, VarA: 1.0 / 3600, Rate: 60, Target: 0.050, Slots: 1}
	near(t, "λ_in", in.LambdaIn(), 80, 1e-12)
	// E[R] at 60/s: 1/(100−60) = 25 ms.
	near(t, "E[R](60)", in.MeanResponse(60), 0.025, 1e-12)
	// Eq. 9 written out by hand: [0.01 + (1e-4 + 1e-4)/(2·0.04)]⁻¹ = 1/0.0125.
	near(t, "eq. 9", in.LambdaIn(), 1/0.0125, 1e-12)
	if got := Needed(400, in.LambdaIn(), 1, 0); got != 5 {
		t.Errorf("Needed(400/s) = %d, want 5", got)
	}
	if got := Needed(401, in.LambdaIn(), 1, 0); got != 6 {
		t.Errorf("Needed(401/s) = %d, want 6", got)
	}
}

// D/D/1: no variance, no wait: E[R] = E[S] below saturation, so a server
// takes 1/E[S] for any target above E[S]. With P slots, P/E[S].
func TestDD1(t *testing.T) {
	in := Inputs{MeanS: 0.020, VarS: 0, VarA: 0, Rate: 30, Target: 0.021, Slots: 1}
	near(t, "λ_in", in.LambdaIn(), 50, 1e-12)
	near(t, "E[R](49)", in.MeanResponse(49), 0.020, 1e-12)
	in.Slots = 4
	near(t, "λ_in P=4", in.LambdaIn(), 200, 1e-9)
	if got := Needed(1000, in.LambdaIn(), 0, 0); got != 5 {
		t.Errorf("Needed = %d, want 5", got)
	}
}

// M/D/1 (Pollaczek–Khinchine): E[R] = E[S] + λ·E[S]²/(2(1−ρ)). E[S] = 10 ms,
// R = 15 ms: 0.005·2(1 − 0.01λ) = 1e-4·λ → λ_in = 0.01/0.0002 = 50/s.
func TestMD1(t *testing.T) {
	in := Inputs{MeanS: 0.010, Rate: 20, VarA: 1.0 / 400, Target: 0.015, Slots: 1}
	near(t, "λ_in", in.LambdaIn(), 50, 1e-12)
}

// M/M/c: with exponential service the model is Erlang C exactly. c = 2,
// E[S] = 1 s, λ = 1: a = 1, C = 1/3, W = C/(2 − 1) = 1/3, E[R] = 4/3.
func TestMM2(t *testing.T) {
	in := Inputs{MeanS: 1, VarS: 1, Rate: 1, VarA: 1, Target: 4.0 / 3, Slots: 2}
	near(t, "E[R](1)", in.MeanResponse(1), 4.0/3, 1e-12)
	near(t, "λ_in", in.LambdaIn(), 1, 1e-9)
	near(t, "ErlangC(1, .5)", ErlangC(1, 0.5), 0.5, 1e-12)
}

func TestNeededBounds(t *testing.T) {
	cases := []struct {
		pred, in float64
		lo, hi   int
		want     int
	}{
		{0, 10, 2, 0, 2},
		{100, 10, 0, 0, 10},
		{100, 10, 0, 8, 8},
		{100, 10, 12, 20, 12},
		{100, 0, 1, 20, 20}, // target unreachable: the ceiling
		{100, 0, 3, 0, 3},
		{100.0000001, 10, 0, 0, 10}, // float noise does not add a server
	}
	for _, c := range cases {
		if got := Needed(c.pred, c.in, c.lo, c.hi); got != c.want {
			t.Errorf("Needed(%v, %v, %d, %d) = %d, want %d", c.pred, c.in, c.lo, c.hi, got, c.want)
		}
	}
	if (Inputs{MeanS: 0.01, Target: 0.01}).LambdaIn() != 0 {
		t.Error("target = E[S] must give λ_in = 0")
	}
}

// simMean simulates a FCFS queue with p identical servers fed by Poisson
// arrivals at rate lambda (Kiefer–Wolfowitz workload vector) and returns
// the mean response time of n customers after a warm-up. service draws a
// service time. The seed is fixed, so the result is deterministic and
// increases with lambda (common random numbers).
func simMean(p int, lambda float64, n int, service func(*rand.Rand) float64) float64 {
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float64, p) // work left at each server, sorted ascending
	warm := n / 10
	sum := 0.0
	for i := 0; i < n+warm; i++ {
		gap := rng.ExpFloat64() / lambda
		s := service(rng)
		for j := range w {
			w[j] = max(0, w[j]-gap)
		}
		wait := w[0]
		w[0] = wait + s
		sort.Float64s(w)
		if i >= warm {
			sum += wait + s
		}
	}
	return sum / float64(n)
}

// trueCapacity is the largest per-server rate whose simulated mean response
// stays within target.
func trueCapacity(p int, meanS, target float64, n int, service func(*rand.Rand) float64) float64 {
	lo, hi := 0.0, float64(p)/meanS
	for range 30 {
		mid := (lo + hi) / 2
		if simMean(p, mid, n, service) <= target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// TestAccuracySweep: on farms of known capacity the model's count is within
// ±1 of the true count (offered rate ÷ one server's capacity at the target)
// for fixed and exponential service, 1–8 slots, and 0.5×, 1×, 2×, 4× the
// load a 4-server farm takes. Arrivals are Poisson, as the sentry measures
// them (σ_a² = 1/λ²). The true capacity is Erlang C for exponential service
// (exact) and a simulation of the M/D/P queue for fixed service.
func TestAccuracySweep(t *testing.T) {
	const meanS = 0.010
	n := 60000
	if testing.Short() {
		n = 15000
	}
	for _, dist := range []string{"fixed", "exp"} {
		for _, p := range []int{1, 2, 4, 8} {
			for _, mult := range []float64{2, 5} { // target = mult·E[S]
				target := mult * meanS
				varS := 0.0
				if dist == "exp" {
					varS = meanS * meanS
				}
				var truth float64
				if dist == "exp" {
					truth = Inputs{MeanS: meanS, VarS: varS, Target: target, Slots: float64(p)}.LambdaIn()
					// cross-check the closed form against the simulation
					sim := trueCapacity(p, meanS, target, n, func(r *rand.Rand) float64 { return r.ExpFloat64() * meanS })
					if math.Abs(sim-truth) > 0.1*truth {
						t.Errorf("exp P=%d R=%g: Erlang C capacity %.1f, simulated %.1f", p, target, truth, sim)
					}
				} else {
					truth = trueCapacity(p, meanS, target, n, func(*rand.Rand) float64 { return meanS })
				}
				for _, load := range []float64{0.5, 1, 2, 4} {
					offered := load * 4 * truth
					want := int(math.Ceil(offered/truth - 1e-9))
					in := Inputs{MeanS: meanS, VarS: varS, VarA: 1 / (offered * offered), Rate: offered, Target: target, Slots: float64(p)}
					got := Needed(offered, in.LambdaIn(), 0, 0)
					t.Logf("%s P=%d R=%gms load=%.1fx: true cap %.1f/s model λ_in %.1f/s: needed %d, true %d", dist, p, target*1000, load, truth, in.LambdaIn(), got, want)
					if got < want-1 || got > want+1 {
						t.Errorf("%s P=%d R=%g load=%g: needed %d, true %d", dist, p, target, load, got, want)
					}
				}
			}
		}
	}
}

// poissonCount draws the arrivals of one second at rate r.
func poissonCount(rng *rand.Rand, r float64) float64 {
	n, t := 0, rng.ExpFloat64()/r
	for t < 1 {
		n++
		t += rng.ExpFloat64() / r
	}
	return float64(n)
}

// TestDispersionLevelShift: Poisson arrivals whose rate steps from 55 to
// 165 req/s and back are still Poisson: c_a² stays near 1 through the
// steps (a step adds one large difference, not minutes of lag).
func TestDispersionLevelShift(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var d Dispersion
	worst, late := 0.0, 0.0
	for i := 0; i < 400; i++ {
		r := 55.0
		if i >= 120 && i < 240 {
			r = 165
		}
		d.Observe(poissonCount(rng, r), time.Second)
		if i >= 120 {
			worst = max(worst, d.CA2())
		}
		if i == 120+90 || i == 240+90 {
			late = max(late, d.CA2())
		}
	}
	if worst > 2.5 {
		t.Errorf("c_a² reached %.2f across the steps; Poisson is 1", worst)
	}
	if late < 0.6 || late > 1.5 {
		t.Errorf("c_a² 90 s after a step = %.2f, want ≈ 1", late)
	}
}

// TestDispersion: Poisson counts give c_a² ≈ 1, evenly spaced arrivals ≈ 0.
func TestDispersion(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var pois, even Dispersion
	if pois.CA2() != 1 {
		t.Fatal("no data must read as Poisson")
	}
	for i := 0; i < 2000; i++ {
		// Poisson(200) by counting exponential gaps within one second.
		n, t := 0, rng.ExpFloat64()/200
		for t < 1 {
			n++
			t += rng.ExpFloat64() / 200
		}
		pois.Observe(float64(n), time.Second)
		even.Observe(200, time.Second)
	}
	if c := pois.CA2(); c < 0.6 || c > 1.4 {
		t.Errorf("Poisson c_a² = %v", c)
	}
	if c := even.CA2(); c > 1e-9 {
		t.Errorf("evenly spaced c_a² = %v", c)
	}
}
