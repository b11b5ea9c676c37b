package lb

// State is the operator's say over a backend, apart from its health: the
// admin API's drain, disable and enable (doc.go, "Operator state").
type State uint32

const (
	// Enabled: in rotation whenever its health allows. The default, and
	// what every backend is when it joins the pool.
	Enabled State = iota
	// Draining: out of rotation -- no new request is picked for it --
	// while the requests in flight finish; health checks go on. Drained
	// once nothing is in flight (Backend.Drained).
	Draining
	// Disabled: out of rotation and out of the health checks
	// (maintenance, HAProxy's MAINT): no active probe and no Reach is
	// sent to it. Requests in flight finish as when draining.
	Disabled
)

// stateMask selects the state in Backend.admin; notedBit marks that the
// end of the current drain ("backend drained") has been logged.
const (
	stateMask = 3
	notedBit  = 4
)

var stateNames = [...]string{Enabled: "enabled", Draining: "draining", Disabled: "disabled"}

// String names the state: enabled, draining or disabled.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// State returns the operator's state of the backend.
func (b *Backend) State() State { return State(b.admin.Load() & stateMask) }

// Drained reports whether the operator took b out of rotation (Draining
// or Disabled) and nothing is in flight to it any more.
func (b *Backend) Drained() bool { return b.State() != Enabled && b.inflight.Load() <= 0 }

// Backend returns the member at addr, or nil.
func (p *Pool) Backend(addr string) *Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.byAddr[addr]
}

// SetState sets the operator's state of the member at addr and returns
// the state it had; ok is false when addr is not a member (nothing
// changes). Every Pick from its return on sees the new state, in every
// engine, since they all pick from this pool: a backend set Draining or
// Disabled leaves the available set (and Healthy's count, the n of the
// admission test) at once, its requests in flight finish, and
// Options.Quiesce is told (now, and again whenever its last request in
// flight is released while it is out), so that the owner closes its idle
// connections to it. Enabled puts it back. Leaving Disabled while active
// checks are on, a backend's health is not known -- its checks were
// paused -- so it comes back down with its rise count one short and is
// probed at once: its first passing probe puts it in rotation, as
// HAProxy's checks do for a server leaving maintenance. Without active
// checks it is in rotation at once.
//
// The state belongs to the member: it lasts until changed, across
// Reconfigure, and a backend that leaves the pool and joins again
// (SetAddrs, DNS) comes back Enabled. SetState does not log: the caller
// logs who asked; the pool logs the end of a drain ("backend drained").
func (p *Pool) SetState(addr string, s State) (prev State, ok bool) {
	b := p.Backend(addr)
	if b == nil {
		return Enabled, false
	}
	cfg := p.cfg.Load()
	b.mu.Lock() // serialises the writers of the state (drained only adds its bit)
	prev = State(b.admin.Load() & stateMask)
	if prev == s {
		b.mu.Unlock()
		return prev, true
	}
	b.admin.Store(uint32(s))
	probe := false
	switch {
	case s == Disabled:
		b.mu.rise, b.mu.fall = 0, 0 // the checks pause; their counts start over
	case prev == Disabled && cfg.active != nil:
		b.down.Store(true)
		b.mu.rise, b.mu.fall = int32(cfg.active.Rise-1), 0
		probe = true
	}
	b.mu.Unlock()
	p.refresh()
	if probe {
		p.probeSoon()
	}
	out := s != Enabled
	if cfg.quiesce != nil {
		cfg.quiesce(b.addr, b.Attachment, out)
	}
	if out && b.inflight.Load() <= 0 {
		p.drained(cfg, b)
	}
	return prev, true
}

// quiesced is Release's part when it released the last request in
// flight to a backend the operator took out of rotation.
func (p *Pool) quiesced(b *Backend) {
	cfg := p.cfg.Load()
	if cfg.quiesce != nil {
		cfg.quiesce(b.addr, b.Attachment, true)
	}
	p.drained(cfg, b)
}

// drained logs, once per state change, that b is out of rotation with
// nothing in flight.
func (p *Pool) drained(cfg *config, b *Backend) {
	for {
		v := b.admin.Load()
		if v&stateMask == uint32(Enabled) || v&notedBit != 0 {
			return
		}
		if b.admin.CompareAndSwap(v, v|notedBit) {
			cfg.log.Info("backend drained", "backend", b.addr, "state", State(v&stateMask).String())
			return
		}
	}
}

// probeSoon asks the active checks for a round now.
func (p *Pool) probeSoon() {
	select {
	case p.probeNow <- struct{}{}:
	default:
	}
}
