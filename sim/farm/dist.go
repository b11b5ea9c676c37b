package farm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DistKind names a service-time distribution.
type DistKind string

// The distributions a Dist can draw from.
const (
	// Fixed always gives Mean.
	Fixed DistKind = "fixed"
	// Exponential has mean Mean (memoryless; M/M/c-like service).
	Exponential DistKind = "exp"
	// Pareto is heavy tailed: P(X > x) = (Scale/x)^Shape for x ≥ Scale.
	// Its mean is Shape·Scale/(Shape−1), so Shape must be > 1.
	Pareto DistKind = "pareto"
)

// maxSample guards the float→Duration conversion of extreme Pareto draws.
// It is not a modelling cap (use Dist.Max for that): a draw this long
// would only end when the farm is closed.
const maxSample = time.Hour

// Dist is a duration distribution: the CPU or I/O part of a route's service
// time. The zero Dist means "no time". In YAML it is either a mapping with
// the fields below or a scalar shorthand accepted by ParseDist ("20ms",
// "exp:20ms", "pareto:20ms:1.5:2s").
type Dist struct {
	// Kind is fixed, exp or pareto. Default fixed when Mean is set; empty
	// with Mean and Scale zero means no time.
	Kind DistKind `yaml:"kind,omitempty"`
	// Mean is the mean of the untruncated distribution (the value itself
	// for fixed). For pareto give Mean or Scale, not both.
	Mean time.Duration `yaml:"mean,omitempty"`
	// Shape is the Pareto tail index α; required for pareto and must be
	// > 1 (1 < α ≤ 2 has infinite variance, as measured web workloads do).
	// Must be zero for the other kinds.
	Shape float64 `yaml:"shape,omitempty"`
	// Scale is the Pareto minimum x_m. Zero means derive it from Mean:
	// x_m = Mean·(α−1)/α. Must be zero for the other kinds.
	Scale time.Duration `yaml:"scale,omitempty"`
	// Max truncates draws (min(X, Max)). Zero means no truncation. With a
	// cap the effective mean is lower than Mean; EffectiveMean gives it.
	Max time.Duration `yaml:"max,omitempty"`
}

// IsZero reports whether d is "no time".
func (d Dist) IsZero() bool { return d.Kind == "" && d.Mean == 0 && d.Scale == 0 }

// normalize fills the defaults (kind fixed; Pareto scale/mean from each
// other) and validates. It never changes a valid explicit value.
func (d Dist) normalize() (Dist, error) {
	if d.IsZero() {
		if d.Shape != 0 || d.Max != 0 {
			return d, fmt.Errorf("dist: shape/max given without kind and mean")
		}
		return d, nil
	}
	if d.Kind == "" {
		d.Kind = Fixed
	}
	if d.Mean < 0 || d.Scale < 0 || d.Max < 0 {
		return d, fmt.Errorf("dist %s: negative duration", d.Kind)
	}
	switch d.Kind {
	case Fixed, Exponential:
		if d.Mean <= 0 {
			return d, fmt.Errorf("dist %s: mean must be > 0", d.Kind)
		}
		if d.Shape != 0 || d.Scale != 0 {
			return d, fmt.Errorf("dist %s: shape and scale apply to pareto only", d.Kind)
		}
	case Pareto:
		if !(d.Shape > 1) || math.IsInf(d.Shape, 0) {
			return d, fmt.Errorf("dist pareto: shape must be > 1 (finite mean), got %v", d.Shape)
		}
		switch {
		case d.Mean > 0 && d.Scale > 0:
			// Accepted only when consistent, so normalize is idempotent.
			want := float64(d.Scale) * d.Shape / (d.Shape - 1)
			if math.Abs(float64(d.Mean)-want) > 1e-3*want+1 {
				return d, fmt.Errorf("dist pareto: give mean or scale, not both")
			}
		case d.Mean > 0:
			d.Scale = time.Duration(float64(d.Mean) * (d.Shape - 1) / d.Shape)
		case d.Scale > 0:
			d.Mean = time.Duration(float64(d.Scale) * d.Shape / (d.Shape - 1))
		default:
			return d, fmt.Errorf("dist pareto: mean or scale must be > 0")
		}
		if d.Scale <= 0 {
			return d, fmt.Errorf("dist pareto: scale rounds to zero")
		}
	default:
		return d, fmt.Errorf("dist: unknown kind %q (want fixed, exp or pareto)", d.Kind)
	}
	return d, nil
}

// Sample draws one duration using r. d must be normalized (Start does
// that; so does ParseDist). r is not safe for concurrent use: the caller
// serialises access.
func (d Dist) Sample(r *rand.Rand) time.Duration {
	var x float64
	switch d.Kind {
	case "":
		return 0
	case Fixed:
		x = float64(d.Mean)
	case Exponential:
		x = r.ExpFloat64() * float64(d.Mean)
	case Pareto:
		u := 1 - r.Float64() // (0, 1]
		x = float64(d.Scale) / math.Pow(u, 1/d.Shape)
	}
	if d.Max > 0 && x > float64(d.Max) {
		return d.Max
	}
	if x >= float64(maxSample) {
		return maxSample
	}
	return time.Duration(x)
}

// EffectiveMean is the mean of the distribution as drawn, i.e. of
// min(X, Max). d must be normalized.
func (d Dist) EffectiveMean() time.Duration {
	mu, m := float64(d.Mean), float64(d.Max)
	switch d.Kind {
	case "":
		return 0
	case Fixed:
		if d.Max > 0 && d.Max < d.Mean {
			return d.Max
		}
		return d.Mean
	case Exponential:
		if d.Max == 0 {
			return d.Mean
		}
		return time.Duration(mu * (1 - math.Exp(-m/mu)))
	case Pareto:
		xm, a := float64(d.Scale), d.Shape
		if d.Max == 0 {
			return d.Mean
		}
		if m <= xm {
			return d.Max
		}
		// E[min(X,M)] = α·xm/(α−1) − xm^α·M^(1−α)/(α−1)
		return time.Duration(a*xm/(a-1) - math.Pow(xm, a)*math.Pow(m, 1-a)/(a-1))
	}
	return 0
}

// String gives the ParseDist form.
func (d Dist) String() string {
	switch d.Kind {
	case "":
		return "0"
	case Pareto:
		s := fmt.Sprintf("pareto:%v:%v", d.Mean, strconv.FormatFloat(d.Shape, 'g', -1, 64))
		if d.Max > 0 {
			s += ":" + d.Max.String()
		}
		return s
	default:
		s := string(d.Kind) + ":" + d.Mean.String()
		if d.Max > 0 {
			s += ":" + d.Max.String()
		}
		return s
	}
}

// ParseDist parses the shorthand used by flags and YAML scalars:
//
//	""  or "0"                  no time
//	"20ms"                      fixed 20 ms
//	"fixed:20ms"                the same
//	"exp:20ms[:MAX]"            exponential, mean 20 ms, optional cap
//	"pareto:20ms:1.5[:MAX]"     Pareto, mean 20 ms, shape 1.5, optional cap
//
// The result is normalized.
func ParseDist(s string) (Dist, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Dist{}, nil
	}
	parts := strings.Split(s, ":")
	var d Dist
	dur := func(i int) (time.Duration, error) {
		v, err := time.ParseDuration(parts[i])
		if err != nil {
			return 0, fmt.Errorf("dist %q: %w", s, err)
		}
		return v, nil
	}
	var err error
	switch {
	case len(parts) == 1:
		d.Kind = Fixed
		d.Mean, err = dur(0)
	case parts[0] == string(Fixed) && len(parts) == 2:
		d.Kind = Fixed
		d.Mean, err = dur(1)
	case parts[0] == string(Exponential) && (len(parts) == 2 || len(parts) == 3):
		d.Kind = Exponential
		if d.Mean, err = dur(1); err == nil && len(parts) == 3 {
			d.Max, err = dur(2)
		}
	case parts[0] == string(Pareto) && (len(parts) == 3 || len(parts) == 4):
		d.Kind = Pareto
		if d.Mean, err = dur(1); err != nil {
			break
		}
		if d.Shape, err = strconv.ParseFloat(parts[2], 64); err != nil {
			err = fmt.Errorf("dist %q: shape: %w", s, err)
			break
		}
		if len(parts) == 4 {
			d.Max, err = dur(3)
		}
	default:
		return Dist{}, fmt.Errorf("dist %q: want DURATION, fixed:MEAN, exp:MEAN[:MAX] or pareto:MEAN:SHAPE[:MAX]", s)
	}
	if err != nil {
		return Dist{}, err
	}
	return d.normalize()
}

// UnmarshalYAML accepts the scalar shorthand or a strict mapping (unknown
// keys are errors, as with Decoder.KnownFields).
func (d *Dist) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		v, err := ParseDist(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		*d = v
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: dist must be a string or a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i]; k.Value {
		case "kind", "mean", "shape", "scale", "max":
		default:
			return fmt.Errorf("line %d: field %s not found in type farm.Dist", k.Line, k.Value)
		}
	}
	type plain Dist
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*d = Dist(p)
	return nil
}

// newRand returns a PCG generator for (seed, stream). Both are scrambled
// with splitmix64 first: PCG seeded with small raw values (0, 0) starts
// with outputs close to 1, which for a Pareto draw is a maximal sample.
func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(splitmix64(seed), splitmix64(stream^0x6a09e667f3bcc909)))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
