package farm

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestParseDist(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		in      string
		want    Dist
		wantErr string
	}{
		{in: "", want: Dist{}},
		{in: "0", want: Dist{}},
		{in: "20ms", want: Dist{Kind: Fixed, Mean: 20 * ms}},
		{in: "fixed:5ms", want: Dist{Kind: Fixed, Mean: 5 * ms}},
		{in: "exp:20ms", want: Dist{Kind: Exponential, Mean: 20 * ms}},
		{in: "exp:20ms:1s", want: Dist{Kind: Exponential, Mean: 20 * ms, Max: time.Second}},
		{in: "pareto:30ms:1.5", want: Dist{Kind: Pareto, Mean: 30 * ms, Shape: 1.5, Scale: 10 * ms}},
		{in: "pareto:30ms:1.5:2s", want: Dist{Kind: Pareto, Mean: 30 * ms, Shape: 1.5, Scale: 10 * ms, Max: 2 * time.Second}},
		{in: "pareto:30ms:1", wantErr: "shape must be > 1"},
		{in: "pareto:30ms", wantErr: "want DURATION"},
		{in: "exp:-1ms", wantErr: "negative"},
		{in: "fixed:0s", wantErr: "mean must be > 0"},
		{in: "gamma:1ms", wantErr: "want DURATION"},
		{in: "20", wantErr: "missing unit"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDist(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			// String round-trips.
			again, err := ParseDist(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip %q: %+v, %v", got.String(), again, err)
			}
			// normalize is idempotent.
			if n, err := got.normalize(); err != nil || n != got {
				t.Fatalf("normalize again: %+v, %v", n, err)
			}
		})
	}
}

// Sample means match EffectiveMean (pure: seeded RNG, no sleeps).
func TestDistSampleMean(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		d    Dist
		n    int
		tol  float64
	}{
		{"fixed", Dist{Kind: Fixed, Mean: 7 * ms}, 10, 0},
		{"fixed capped", Dist{Kind: Fixed, Mean: 7 * ms, Max: 5 * ms}, 10, 0},
		{"exp", Dist{Kind: Exponential, Mean: 20 * ms}, 100000, 0.015},
		{"exp capped", Dist{Kind: Exponential, Mean: 20 * ms, Max: 30 * ms}, 100000, 0.015},
		{"pareto 2.5", Dist{Kind: Pareto, Mean: 20 * ms, Shape: 2.5}, 200000, 0.02},
		{"pareto 1.5 capped", Dist{Kind: Pareto, Mean: 20 * ms, Shape: 1.5, Max: 2 * time.Second}, 200000, 0.03},
		{"pareto cap below scale", Dist{Kind: Pareto, Scale: 20 * ms, Shape: 3, Max: 10 * ms}, 100, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.d.normalize()
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			var sum float64
			for i := 0; i < tc.n; i++ {
				x := d.Sample(r)
				if x < 0 || (d.Max > 0 && x > d.Max) {
					t.Fatalf("sample %v out of range", x)
				}
				sum += float64(x)
			}
			got := sum / float64(tc.n)
			want := float64(d.EffectiveMean())
			if math.Abs(got-want) > tc.tol*want+1 {
				t.Fatalf("sample mean %v, effective mean %v", time.Duration(got), time.Duration(want))
			}
		})
	}
}

// The Pareto tail: P(X > k·xm) = k^−α.
func TestParetoTail(t *testing.T) {
	d, err := ParseDist("pareto:30ms:1.5")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	const n = 200000
	over := 0
	for i := 0; i < n; i++ {
		if d.Sample(r) > 10*d.Scale {
			over++
		}
	}
	got, want := float64(over)/n, math.Pow(10, -1.5)
	if math.Abs(got-want) > 0.1*want {
		t.Fatalf("P(X > 10 xm) = %.4f, want %.4f", got, want)
	}
}

func TestDistYAML(t *testing.T) {
	var v struct {
		A Dist `yaml:"a"`
		B Dist `yaml:"b"`
	}
	src := "a: exp:10ms\nb: {kind: pareto, mean: 30ms, shape: 1.5, max: 1s}\n"
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != (Dist{Kind: Exponential, Mean: 10 * time.Millisecond}) {
		t.Fatalf("a = %+v", v.A)
	}
	b, err := v.B.normalize()
	if err != nil || b.Scale != 10*time.Millisecond || b.Max != time.Second {
		t.Fatalf("b = %+v, %v", b, err)
	}
	err = yaml.Unmarshal([]byte("a: {kind: exp, mena: 10ms}\n"), &v)
	if err == nil || !strings.Contains(err.Error(), "mena") {
		t.Fatalf("unknown key: err = %v", err)
	}
}
