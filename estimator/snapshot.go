package estimator

import "time"

// Snapshot is a read-only copy of an estimator's state for metrics and
// status pages.
type Snapshot struct {
	Classes   []ClassSnapshot // by class index
	Q         time.Duration
	Alpha     float64
	Keys      int
	MaxKeys   int
	Evictions uint64
}

// ClassSnapshot is one class's state.
type ClassSnapshot struct {
	Name string
	// Rate is the smoothed arrival rate λ in requests per second.
	Rate float64
	// Mean and StdDev are of the class's inherent service time S.
	Mean, StdDev time.Duration
	// Weight is the decayed number of S samples behind Mean.
	Weight float64
}

// Snapshot copies the state. now closes any finished rate windows. Means and
// Q are as of the last refresh (see Refresh). It allocates; call it at
// scrape time, not per request.
func (e *Estimator) Snapshot(now time.Time) Snapshot {
	sn := e.snap.Load()
	s := Snapshot{
		Classes:   make([]ClassSnapshot, len(sn.classes)),
		Q:         e.Q(),
		Alpha:     e.Alpha(),
		Keys:      e.Len(),
		MaxKeys:   sn.cfg.MaxKeys,
		Evictions: e.Evictions(),
	}
	for i := range sn.classes {
		m, sd, w := e.ClassStats(i)
		s.Classes[i] = ClassSnapshot{Name: sn.names[i], Rate: e.Rate(i, now), Mean: m, StdDev: sd, Weight: w}
	}
	return s
}
