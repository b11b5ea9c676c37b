package batchac

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// State is what the controller reads about the farm at run time. The proxy
// implements it from the load balancer and the estimator. Every method must
// be safe for concurrent use and cheap (an atomic load or two): a policer run
// calls each once, an immediate (d = 0) test calls each once per request.
type State interface {
	// Q is the current estimate of the mean queueing delay at the backends
	// before service starts (Cataclysm §3.4).
	Q() time.Duration
	// QNow is the queueing delay the latest completions met: the same
	// measurement as Q with a memory of a fraction of a second, so that
	// it says whether the backends are queueing now. The work-conserving
	// rule reads it (doc.go, Work conservation); Q, which lags by
	// seconds, is the test's.
	QNow() time.Duration
	// Inflight is the number of requests this sentry has dispatched to the
	// app's backends and not yet seen finish.
	Inflight() int64
	// Healthy is n, the number of healthy backends this sentry owns.
	Healthy() int
	// RSLA is the current response-time target for admitted requests.
	RSLA() time.Duration
	// Demand is class's offered work rate: its arrival rate (rejected
	// requests included) times its mean inherent service time, in
	// server-seconds per second. It should follow a rise quickly (within a
	// fraction of a second); the reserve (see doc.go, Priority) is built
	// from it. Read once per class every ReservePeriod, not per request.
	Demand(class int) float64
	// MeanS is class's mean inherent service time (0: unknown). The
	// reserve judges the load a class leaves at the size of the more
	// important classes' requests. Read with Demand.
	MeanS(class int) time.Duration
	// Sustained is the work one backend has been seen to sustain within the
	// SLA, in server-seconds per second (0: not known yet). The reserve
	// divides by n·max(P, Sustained()): a parallelism learned too low would
	// otherwise make the more important classes' share look larger than it
	// is and starve the others. Read with Demand.
	Sustained() float64
}

// ShareState is an optional State method set for fair sharing inside a
// class (doc.go, Fair share): a State that has it makes the fair-share
// tiers (admission.OverShare, admission.Marginal) hold room for the
// class's within-share demand. Without it those tiers are tested as
// their class, the marginal one with the floor held for the turns.
type ShareState interface {
	// WithinShareDemand is class's demand within its clients' fair
	// shares: their arrival rate times the class's mean inherent service
	// time, in server-seconds per second; 0 while the class is not
	// shedding. Read with Demand, every ReservePeriod.
	WithinShareDemand(class int) float64
}

// ClassConfig is one request class. Classes are listed most important first:
// Config.Classes[0] is C1.
type ClassConfig struct {
	// Name identifies the class in metrics and across Reconfigure; it must be
	// non-empty and unique.
	Name string
	// Period is d_i, how often the class's policer runs. Zero means the test
	// runs for each request on arrival, synchronously in Admit, with no wait
	// queue. Must not be negative.
	Period time.Duration
}

// Config configures a Controller.
type Config struct {
	// Classes, most important first. At least one; at most MaxClasses.
	Classes []ClassConfig
	// Buckets is b, the number of service-time buckets per class; a request's
	// Bucket index is clamped to [0, Buckets). Default 8 (the estimator's
	// default edges 1, 4, 16, 64, 256 ms, 1 s, 4 s make 8 buckets).
	Buckets int
	// QueueCap is the cap of each (class, bucket) wait queue, in requests.
	// An arrival beyond it is rejected at once with RejectQueueFull.
	// Default 1024; must not be negative.
	QueueCap int
	// AllOrNothing keeps the paper's outcome rule: a bucket is admitted or
	// rejected as a whole. The default (false) admits the largest FIFO prefix
	// of the bucket that passes the test and rejects the rest.
	AllOrNothing bool
	// Parallelism is P, the number of requests one backend serves at full
	// speed at once (its worker slots / cores). P = 1 is the paper's model of
	// one processor-shared CPU. Default 1; must be ≥ 1 and finite.
	Parallelism float64
	// LearnParallelism lets ObserveService refine P online, starting from
	// Parallelism. Default false: ObserveService is a no-op.
	LearnParallelism bool
	// StrictPeriods makes every request of a class with a period wait for
	// the class's next policer run, as the paper has it. The default
	// (false) admits an arrival at once when nothing of its class waits
	// and a batch of one passes the same test the run would apply (see
	// doc.go, Early admission): below overload a period then costs no
	// latency, and under overload the requests wait for their run.
	StrictPeriods bool
	// NoReserve turns off the room held for more important classes (see
	// doc.go, Priority): each class is then tested only against the farm's
	// present load, first come, first served. Default false (reserve on).
	NoReserve bool
	// NoImpliedQueue keeps the paper's test: the queueing delay charged is
	// State.Q alone. The default (false) charges at least the backend
	// queue the in-flight count implies now, max(0, η − P)/P · S, with P
	// at least State.Sustained() (see doc.go, The queue at a load step):
	// Q is measured from finished requests and lags a load step by a
	// second or more, during which the test would admit a queue whose
	// wait alone is the whole budget.
	NoImpliedQueue bool
	// ReserveFloor is the least share of the more important classes'
	// budget that is always held for them, even while they are quiet, as a
	// fraction in [0, 1). Zero holds nothing beyond their measured demand;
	// the policy's default is DefaultReserveFloor.
	ReserveFloor float64
	// ConstLabels are added to every exported metric, e.g. {"app": "shop"},
	// so several controllers can share one registry. Values come from config.
	// Only read by New.
	ConstLabels prometheus.Labels
	// Now is the clock. Default time.Now. Only read by New: Reconfigure keeps
	// the clock the controller was built with.
	Now func() time.Time
}

// MaxClasses bounds the number of classes (cascade marks are scanned per
// request in immediate mode).
const MaxClasses = 64

// Defaults.
const (
	DefaultBuckets  = 8
	DefaultQueueCap = 1024
	// DefaultReserveFloor is the policy's default ReserveFloor: a quarter
	// of the budget of the more important classes is held even while they
	// are quiet, so their first requests after a pause do not meet a farm
	// queued to the brim. It bounds how deep less important classes queue,
	// not throughput (free slots are always filled).
	DefaultReserveFloor = 0.25
)

// ReservePeriod is how often the reserve is recomputed from State.Demand.
const ReservePeriod = 50 * time.Millisecond

// withDefaults returns a copy of cfg with defaults filled in, or an error
// describing the first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Classes) == 0 {
		return cfg, errors.New("batchac: no classes")
	}
	if len(cfg.Classes) > MaxClasses {
		return cfg, fmt.Errorf("batchac: %d classes, at most %d", len(cfg.Classes), MaxClasses)
	}
	seen := make(map[string]bool, len(cfg.Classes))
	classes := make([]ClassConfig, len(cfg.Classes))
	for i, c := range cfg.Classes {
		switch {
		case c.Name == "":
			return cfg, fmt.Errorf("batchac: class %d: empty name", i)
		case seen[c.Name]:
			return cfg, fmt.Errorf("batchac: class %q listed twice", c.Name)
		case c.Period < 0:
			return cfg, fmt.Errorf("batchac: class %q: negative period %v", c.Name, c.Period)
		}
		seen[c.Name] = true
		classes[i] = c
	}
	cfg.Classes = classes
	switch {
	case cfg.Buckets == 0:
		cfg.Buckets = DefaultBuckets
	case cfg.Buckets < 0:
		return cfg, fmt.Errorf("batchac: negative bucket count %d", cfg.Buckets)
	}
	switch {
	case cfg.QueueCap == 0:
		cfg.QueueCap = DefaultQueueCap
	case cfg.QueueCap < 0:
		return cfg, fmt.Errorf("batchac: negative queue cap %d", cfg.QueueCap)
	}
	switch {
	case cfg.Parallelism == 0:
		cfg.Parallelism = 1
	case math.IsNaN(cfg.Parallelism) || math.IsInf(cfg.Parallelism, 0) || cfg.Parallelism < 1:
		return cfg, fmt.Errorf("batchac: parallelism %v: must be ≥ 1 and finite", cfg.Parallelism)
	case cfg.Parallelism > maxParallelism:
		return cfg, fmt.Errorf("batchac: parallelism %v: at most %d", cfg.Parallelism, maxParallelism)
	}
	if math.IsNaN(cfg.ReserveFloor) || cfg.ReserveFloor < 0 || cfg.ReserveFloor >= 1 {
		return cfg, fmt.Errorf("batchac: reserve floor %v: must be in [0, 1)", cfg.ReserveFloor)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}
