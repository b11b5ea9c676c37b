package fairshare

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

// Ways is the number of slots in a bucket of the client table: a client
// key maps to one bucket and may sit in any of its ways.
const Ways = 8

// Table sizes and times (doc.go gives the reasons).
const (
	// DefaultSlots is the default table size: clients tracked at once
	// (per app, per class a client is active in).
	DefaultSlots = 16384
	// MinSlots and MaxSlots bound Config.Slots.
	MinSlots = 64
	MaxSlots = 1 << 22
	// DefaultRotate is the default rotation period of the clients' turns
	// (DAGOR's user priority rotates hourly; doc.go, Turns).
	DefaultRotate = 10 * time.Minute
	// TickInterval is how often Tick should run: the table's rates, the
	// fair level and the turns are recomputed that often.
	TickInterval = 100 * time.Millisecond
)

const (
	// rateTau is the time constant of a client's smoothed rates.
	rateTau = time.Second
	// turnTau is the time constant of the slower rate a client is judged
	// by (demand), unless it rose riseRatio above it.
	turnTau   = 30 * time.Second
	riseRatio = 2
	// floodRatio: a client sending more than floodRatio × the fair level
	// gets no turns (one would be a sliver of the rotation, and it would
	// not fit the turns' budget anyway): it is let through at the fair
	// level all the time, each request with the probability f/rate.
	floodRatio = 8
	// admitTau smooths the class's admitted rate, the capacity the fair
	// level shares out.
	admitTau = time.Second
	// heldTau smooths the capacity into what the class held over the
	// last seconds: a client is within its share by the fair level of
	// the larger of the two (doc.go, Standing).
	heldTau = 10 * time.Second
	// riseGain: how fast, per tick, the capacity grows once the filter
	// alone has been the limit for riseAfter: it doubles, as TCP's slow
	// start does. The mode is the guard of the SLA, not the capacity
	// estimate: a capacity that overshoots stops the filter being the
	// limit, and the mode's first refusal sets it back to what the class
	// admitted. At 20% a tick, a flood from the first second (the mode's
	// model still learning, the capacity learned at a few requests a
	// second) held every client, polite ones included, over its share for
	// 3-4 s (fairshare.yaml's start).
	riseGain = 1.0
	// riseAfter: how long the mode must have taken all the filter let
	// through, while the filter turned some away, before the capacity
	// grows. A second: with less (300 ms), adaptive mode's refusals come
	// too seldom to stop a rise in time, the capacity overshot, and the
	// flood took polite bronze's room beside gold (TestFairGoldInBronzeFlood,
	// 96.5% against 100%).
	riseAfter = time.Second
	// keepSlack: a client in its turn keeps it while the turns' demand is
	// within this share above their budget (the margin absorbs it), so
	// that noise in the rates does not take turns away and give them back.
	keepSlack = 0.03
	// probeGain is how far past the capacity the marginal tier is let
	// through, a share of the capacity: the mode refuses the marginal tier
	// first, so the excess costs no one in a turn; it keeps the mode
	// refusing a little in steady state, and a capacity that grows shows
	// in what the marginal tier gets.
	probeGain = 0.03
	// turnMargin is the share of the admitted rate the turns leave to the
	// marginal tier: the turns fill the farm to just under what it
	// carries, so the mode seldom has to refuse a request of a client in
	// its turn, and the marginal clients fill the rest.
	turnMargin = 0.03
	// quietFor is how long a class keeps sharing after its last refusal.
	quietFor = time.Second
	// idleAfter frees a slot whose client sent nothing for that long.
	idleAfter = 30 * time.Second
	// activeWindow: a client that sent something within it is active.
	activeWindow = 10 * time.Second
	// minCapacity is the least admitted rate (requests per second) a class
	// must have for sharing to act: below it there is nothing to share,
	// and the mode's own verdicts (cascade, priority) say why.
	minCapacity = 1.0
	// burstWindow: a within-share client's bucket refills at the fair
	// level and holds that many seconds of it; once it is empty, the
	// client's further requests of the tick count as over share (a
	// client that starts to flood). allowTicks: a client new in the tick
	// may send its fair level's worth of that many ticks.
	burstWindow = 2 * time.Second
	allowTicks  = 2
	// topN is how many top talkers Top keeps.
	topN = 10
)

// The per-slot counters, packed in one word so that a decision costs one
// atomic add: admitted, refused by the mode (capacity), shed (a
// spare-only request refused). 21 bits each: over 2 million per field per
// tick.
const (
	fieldBits = 21
	fieldMask = 1<<fieldBits - 1
	oneAdmit  = 1
	oneRefuse = 1 << fieldBits
	oneShed   = 1 << (2 * fieldBits)
)

func fields(x uint64) (a, r, s uint64) {
	return x & fieldMask, x >> fieldBits & fieldMask, x >> (2 * fieldBits) & fieldMask
}

// A slot's state, written by Tick, read per request: the kind in the low
// two bits; a marginal client's rank in the tier in bits 8-15; in the
// high 32, a marginal client's or a flood's pass probability (× 2³²), or
// a within-share client's allowance for the tick (+ 1).
const (
	stIn      = 0 // within its share: WithinShare
	stOn      = 1 // over its share, has its turn: OverShare (a flood: with a probability, else SpareOnly)
	stPartial = 2 // a marginal client: Marginal with a probability, else SpareOnly
	stOff     = 3 // over its share, no turn: SpareOnly
)

// Slot names a client's entry for Done; NoSlot is a request outside fair
// sharing.
type Slot int32

// NoSlot is the slot of a request without a client key.
const NoSlot Slot = -1

// Config configures a Table.
type Config struct {
	// Classes are the app's class names, most important first. At least one.
	Classes []string
	// Slots is the number of (client, class) entries kept; 0 means
	// DefaultSlots. Rounded up to a multiple of Ways; MinSlots–MaxSlots.
	Slots int
	// Rotate is the rotation period of the over-share clients' turns; 0
	// means DefaultRotate.
	Rotate time.Duration
	// Rand draws the marginal client's pass; nil means the runtime's
	// per-thread generator. Tests inject a seeded one.
	Rand func() uint32
}

// Table is an app's fair-share state: a fixed-size table of clients,
// each class's capacity and fair level, and every client's standing. Share
// and Done are lock-free except when a new client takes a slot; Tick
// recomputes. Safe for concurrent use.
type Table struct {
	cfg     Config
	buckets uint64
	keys    []atomic.Uint64 // 0: empty
	cnt     []atomic.Uint64 // this tick's decisions, packed (fields)
	state   []atomic.Uint64 // stIn, stOn, stPartial, stOff | rank<<8 | p<<32
	score   []atomic.Uint32 // eviction score: the smoothed rate in milli-requests/s
	prio    []atomic.Uint32 // this tick's refusals that held room for a more important class
	cold    []cold          // guarded by the bucket's lock
	tk      []tickSlot      // Tick's own
	locks   []sync.Mutex    // one per bucket: insertion and Tick
	classes []*classState
	rand    func() uint32
	top     atomic.Pointer[[]Client]

	tick struct {
		sync.Mutex
		last  time.Time
		n     uint64
		lists [][]member
		rates []float64
		over  []overEntry
	}
}

// cold is a slot's state Tick keeps, and the name the status page shows.
type cold struct {
	class    int32
	addr     [16]byte
	v4, some bool    // addr holds an IPv4 address; addr is set
	rate     float64 // smoothed arrivals per second
	slow     float64 // the same over turnTau
	adm      float64 // smoothed admissions per second
	seen     int64   // unix ns of the last tick with arrivals
	since    int64   // unix ns the client took the slot
}

// tickSlot is what Tick remembers of a slot's client between ticks; key
// tells whose it is (a slot taken by another client starts afresh).
type tickSlot struct {
	key  uint64
	on   bool  // had a turn (On or Partial) after the last tick
	kind uint8 // the state last written
	// psi is the client's place on the circle at the last tick it was
	// over its share; done says it had its turn of this rotation and the
	// turn is over (its place reached f/rate), until its place passes 0
	// again: noise in f/rate must not end a turn and start it again.
	psi  float64
	done bool
	// flood: let through as a flood (rate > floodRatio f) at the last
	// tick, which is not a turn.
	flood bool
	// allow is the within-share requests the client may send in the
	// tick (its bucket plus the tick's refill), as published; filled:
	// its bucket is kept (the class shares and the client is within).
	allow  float64
	filled bool
}

// member is an active client of a class in one tick.
type member struct {
	slot int32
	key  uint64
	rate float64 // its demand (demand)
	n    uint64  // its requests in the last tick
}

// demand is the rate a client is judged by: its slow rate, which Poisson
// noise hardly moves (a client near the fair level must not cross it and
// back every tick); Tick sets the slow rate to the fast one when they
// part by more than riseRatio (a client that rose or fell is judged by
// what it sends now).
func demand(_, slow float64) float64 { return slow }

// classState is one class's sharing state.
type classState struct {
	name   string
	active atomic.Bool
	allow  atomic.Uint64 // arrivals per tick a within-share client may send
	inRate atomic.Uint64 // float64 bits: Σ rate of the within-share clients, /s
	onRate atomic.Uint64 // float64 bits: Σ rate of the over-share clients in their turns, /s

	// Exported at scrape time.
	clients, over atomic.Int64
	level, capa   atomic.Uint64 // float64 bits: fair level and capacity, /s
	shedOver      atomic.Uint64 // refusals of clients over their share
	shedIn        atomic.Uint64 // refusals of clients within it

	// Tick's own.
	capacity    float64
	admitted    float64
	lastRefused int64
	started     bool
	held        float64 // the capacity smoothed over heldTau
}

// overEntry is one over-share client in a tick's computation.
type overEntry struct {
	slot  int32
	key   uint64
	rate  float64
	turn  float64 // ψ/φ: its place over its turn's length; below 1 in its turn
	group uint8   // 0: in its turn and had it, 1: in its turn, waiting, 2: past it
}

// New returns an empty table.
func New(cfg Config) (*Table, error) {
	if len(cfg.Classes) == 0 {
		return nil, errors.New("fairshare: no classes")
	}
	switch {
	case cfg.Slots == 0:
		cfg.Slots = DefaultSlots
	case cfg.Slots < MinSlots || cfg.Slots > MaxSlots:
		return nil, fmt.Errorf("fairshare: %d slots, want %d to %d", cfg.Slots, MinSlots, MaxSlots)
	}
	cfg.Slots = (cfg.Slots + Ways - 1) / Ways * Ways
	switch {
	case cfg.Rotate == 0:
		cfg.Rotate = DefaultRotate
	case cfg.Rotate < TickInterval:
		return nil, fmt.Errorf("fairshare: rotate %v is shorter than a tick (%v)", cfg.Rotate, TickInterval)
	}
	cfg.Classes = slices.Clone(cfg.Classes)
	t := &Table{
		cfg:     cfg,
		buckets: uint64(cfg.Slots / Ways),
		keys:    make([]atomic.Uint64, cfg.Slots),
		cnt:     make([]atomic.Uint64, cfg.Slots),
		state:   make([]atomic.Uint64, cfg.Slots),
		score:   make([]atomic.Uint32, cfg.Slots),
		prio:    make([]atomic.Uint32, cfg.Slots),
		cold:    make([]cold, cfg.Slots),
		tk:      make([]tickSlot, cfg.Slots),
		locks:   make([]sync.Mutex, cfg.Slots/Ways),
		rand:    cfg.Rand,
	}
	if t.rand == nil {
		t.rand = cheaprand
	}
	for _, n := range cfg.Classes {
		cs := &classState{name: n}
		cs.level.Store(math.Float64bits(math.Inf(1)))
		t.classes = append(t.classes, cs)
	}
	t.tick.lists = make([][]member, len(cfg.Classes))
	return t, nil
}

// Slots is the table's size.
func (t *Table) Slots() int { return len(t.keys) }

// Rotate is the rotation period of the turns.
func (t *Table) Rotate() time.Duration { return t.cfg.Rotate }

// Classes are the class names the table was built for.
func (t *Table) Classes() []string { return t.cfg.Classes }

// classIndex clamps a request's class as batchac does: out of range is the
// least important.
func (t *Table) classIndex(c int) int {
	if c < 0 || c >= len(t.classes) {
		return len(t.classes) - 1
	}
	return c
}

// entryKey mixes the client key with its class (splitmix64's finaliser):
// a client has one entry per class it is active in.
func entryKey(client uint64, class int) uint64 {
	z := client + uint64(class+1)*0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	z ^= z >> 31
	if z == 0 {
		return 1
	}
	return z
}

// bucket maps a key to its bucket (Lemire's multiply-shift range map).
func (t *Table) bucket(k uint64) uint64 {
	hi, _ := mulhi(k, t.buckets)
	return hi
}

func mulhi(a, b uint64) (hi, lo uint64) {
	const mask32 = 1<<32 - 1
	a0, a1 := a&mask32, a>>32
	b0, b1 := b&mask32, b>>32
	w0 := a0 * b0
	t := a1*b0 + w0>>32
	w1, w2 := t&mask32, t>>32
	w1 += a0 * b1
	return a1*b1 + w2 + w1>>32, a * b
}

// Share finds (or makes) the entry of client in class and returns it with
// the request's standing (admission.Share): WithinShare while the class
// is not shedding or the client sends at most its share; OverShare while
// an over-share client has its turn; Marginal, with the probability that
// fills the class's capacity, for a client of the marginal tier, with
// its rank in the tier (admission.Request.Rank; 0 for every other
// standing); SpareOnly otherwise. A request without a client (0) is
// WithinShare, NoSlot. addr names a new
// client on the status page. Share does not allocate; it takes a bucket
// lock only for a client without an entry.
func (t *Table) Share(class int, client uint64, addr netip.Addr) (Slot, admission.Share, uint8) {
	if client == 0 {
		return NoSlot, admission.WithinShare, 0
	}
	class = t.classIndex(class)
	k := entryKey(client, class)
	base := int(t.bucket(k)) * Ways
	slot := -1
	for i := base; i < base+Ways; i++ {
		if t.keys[i].Load() == k {
			slot = i
			break
		}
	}
	if slot < 0 {
		slot = t.insert(base, k, class, addr)
	}
	st := t.state[slot].Load()
	switch st & 3 {
	case stIn:
		if cs := t.classes[class]; cs.active.Load() {
			// Its bucket (Tick publishes what it holds for the tick, + 1;
			// 0: a client new in the tick, the class's allowance).
			lim := st >> 32
			if lim == 0 {
				lim = cs.allow.Load()
			} else {
				lim--
			}
			a, r, s := fields(t.cnt[slot].Load())
			if a+r+s >= lim {
				return Slot(slot), admission.OverShare, 0
			}
		}
		return Slot(slot), admission.WithinShare, 0
	case stOn:
		if p := uint32(st >> 32); p == 0 || t.rand() < p {
			return Slot(slot), admission.OverShare, 0
		}
	case stPartial:
		if t.rand() < uint32(st>>32) {
			return Slot(slot), admission.Marginal, uint8(st >> 8)
		}
	}
	return Slot(slot), admission.SpareOnly, 0
}

// insert puts key k of class into the bucket at base: an empty way, else
// the way with the least traffic (its smoothed rate plus this tick's
// decisions), so that one-off clients evict each other and a steady one
// keeps its slot. Returns the slot; a racing insert of the same key finds
// it.
func (t *Table) insert(base int, k uint64, class int, addr netip.Addr) int {
	mu := &t.locks[base/Ways]
	mu.Lock()
	victim, best := -1, uint64(math.MaxUint64)
	for i := base; i < base+Ways; i++ {
		switch kk := t.keys[i].Load(); {
		case kk == k:
			mu.Unlock()
			return i
		case kk == 0:
			if best > 0 {
				victim, best = i, 0
			}
		default:
			a, r, s := fields(t.cnt[i].Load())
			if sc := uint64(t.score[i].Load()) + 1000*(a+r+s); sc < best {
				victim, best = i, sc
			}
		}
	}
	c := &t.cold[victim]
	*c = cold{class: int32(class)}
	if addr.IsValid() {
		addr = addr.Unmap()
		c.addr, c.v4, c.some = addr.As16(), addr.Is4(), true
	}
	t.cnt[victim].Store(0)
	t.prio[victim].Store(0)
	t.state[victim].Store(stIn)
	t.score[victim].Store(0)
	t.keys[victim].Store(k)
	mu.Unlock()
	return victim
}

// Done counts a decision of the request Share placed in slot with share:
// an admission, a refusal for capacity by the mode, or a spare-only
// request refused (shed). A client gone or no backend counts nothing.
// One atomic add; no lock, no allocation.
func (t *Table) Done(slot Slot, share admission.Share, v admission.Verdict) {
	if slot < 0 || int(slot) >= len(t.cnt) {
		return
	}
	switch {
	case v == admission.Admit:
		t.cnt[slot].Add(oneAdmit)
	case v == admission.RejectGone, v == admission.RejectNoBackend:
	case v == admission.RejectPriority:
		t.cnt[slot].Add(oneRefuse)
		t.prio[slot].Add(1)
	case share == admission.SpareOnly:
		t.cnt[slot].Add(oneShed)
	default:
		t.cnt[slot].Add(oneRefuse)
	}
}

// ShareRates is class's within-share arrival rate and that of its
// over-share clients in their turns (requests per second) as of the last
// Tick: the demand the tiers below hold room for. 0 while the class is
// not shedding.
func (t *Table) ShareRates(class int) (within, turns float64) {
	cs := t.classes[t.classIndex(class)]
	if !cs.active.Load() {
		return 0, 0
	}
	return math.Float64frombits(cs.inRate.Load()), math.Float64frombits(cs.onRate.Load())
}

// Tick recomputes every client's rates and standing at now (every
// TickInterval; Run calls it, tests drive it on a manual clock). See
// doc.go for the rule.
func (t *Table) Tick(now time.Time) {
	t.tick.Lock()
	defer t.tick.Unlock()
	if t.tick.last.IsZero() {
		t.tick.last = now
		return
	}
	dt := now.Sub(t.tick.last).Seconds()
	if dt <= 0 {
		return
	}
	t.tick.last = now
	t.tick.n++
	nowNs := now.UnixNano()
	ar := 1 - math.Exp(-dt/rateTau.Seconds())
	as := 1 - math.Exp(-dt/turnTau.Seconds())
	type tally struct{ a, r, s, p, shedOver, shedIn uint64 }
	var sums [64]tally
	tallies := sums[:0]
	if len(t.classes) <= len(sums) {
		tallies = sums[:len(t.classes)]
	} else {
		tallies = make([]tally, len(t.classes))
	}
	for i := range t.tick.lists {
		t.tick.lists[i] = t.tick.lists[i][:0]
	}
	for b := 0; b < int(t.buckets); b++ {
		mu := &t.locks[b]
		mu.Lock()
		for s := b * Ways; s < b*Ways+Ways; s++ {
			key := t.keys[s].Load()
			if key == 0 {
				continue
			}
			if t.tk[s].key != key {
				t.tk[s] = tickSlot{key: key}
			}
			a, r, sh := fields(t.cnt[s].Swap(0))
			pr := uint64(t.prio[s].Swap(0))
			c := &t.cold[s]
			n := a + r + sh
			if c.since == 0 {
				c.since, c.seen = nowNs, nowNs
			}
			// A client's rates are its mean since it took the slot until
			// that is longer than their time constants (a new client's
			// rate is known from its first tick, not climbed to).
			w := dt / (float64(nowNs-c.since)/1e9 + dt)
			c.rate += max(ar, w) * (float64(n)/dt - c.rate)
			c.slow += max(as, w) * (float64(n)/dt - c.slow)
			if c.rate > riseRatio*c.slow || c.slow > riseRatio*c.rate {
				c.slow = c.rate // a client that rose or fell: judged by what it sends now
			}
			c.adm += max(ar, w) * (float64(a)/dt - c.adm)
			if n > 0 {
				c.seen = nowNs
			} else if nowNs-c.seen > int64(idleAfter) {
				t.keys[s].Store(0)
				t.state[s].Store(stIn)
				*c = cold{}
				t.tk[s] = tickSlot{}
				continue
			}
			t.score[s].Store(uint32(min(c.rate*1000, math.MaxUint32)))
			cl := int(c.class)
			if cl >= len(tallies) {
				continue
			}
			x := &tallies[cl]
			x.a += a
			x.r += r
			x.p += min(pr, r)
			x.s += sh
			switch t.tk[s].kind {
			case stIn:
				x.shedIn += r + sh
			default:
				x.shedOver += r + sh
			}
			if nowNs-c.seen <= int64(activeWindow) {
				t.tick.lists[cl] = append(t.tick.lists[cl], member{slot: int32(s), key: key, rate: demand(c.rate, c.slow), n: n})
			}
		}
		mu.Unlock()
	}
	for i, cs := range t.classes {
		x := tallies[i]
		cs.shedOver.Add(x.shedOver)
		cs.shedIn.Add(x.shedIn)
		t.share(cs, i, t.tick.lists[i], x.a, x.r, x.p, x.s, dt, nowNs)
	}
	if t.tick.n%10 == 1 {
		t.publishTop(nowNs)
	}
}

// share recomputes one class: its capacity, its fair level, and every
// active client's standing (doc.go, The rule). Called with t.tick held.
func (t *Table) share(cs *classState, class int, slots []member, a, r, p, s uint64, dt float64, nowNs int64) {
	admRate := float64(a) / dt
	follow := 1 - math.Exp(-dt/admitTau.Seconds())
	switch {
	case a+r+s == 0:
		// Nothing offered (an idle class, a stalled client): nothing
		// learned, and the capacity is not forgotten.
	case !cs.started:
		cs.started, cs.admitted = true, admRate
	default:
		cs.admitted += follow * (admRate - cs.admitted)
	}
	switch {
	case r > p:
		// The mode refused requests the filter let through: the class
		// gets what it admitted -- its smoothed rate, or the tick's own
		// if higher and below the capacity (the mode refused in the tick
		// the capacity rose to: what it admitted then is a sample of its
		// capacity, which the smoothed rate lags).
		cs.lastRefused = nowNs
		cs.capacity = max(cs.admitted, min(cs.capacity, admRate))
	case r > 0:
		// Its only refusals held room for a more important class
		// (admission.RejectPriority): they say when the classes above
		// burst, not what the class can carry between their bursts. The
		// class does not start to share for them, and its capacity does
		// not follow them down. (It did: the capacity sank with every
		// burst, the filter let through less than the mode would take
		// between them, the mode admitted less, and the capacity sank
		// further -- polite bronze beside gold admitted 74% with
		// sharing, 83% without.)
		cs.capacity = max(cs.capacity, cs.admitted)
	default:
		// It had room for all it was given: the capacity is at least
		// what it admitted. The marginal client, let through past the
		// capacity, shows a capacity that grows (doc.go, The capacity).
		cs.capacity = max(cs.capacity, cs.admitted)
	}
	if r == 0 && s > 0 && cs.active.Load() && nowNs-cs.lastRefused > int64(riseAfter) {
		// For riseAfter the mode took all the filter let through while
		// the filter turned some away: the filter, not the farm, is the
		// limit, with a capacity that sank (a stall) or was learned low
		// (a start, while the mode's model grew). The marginal tier's
		// probe may not show it: the clients it goes to may have no more
		// to send, and a flood is held at f. The capacity grows by
		// riseGain a tick until the mode refuses again.
		cs.capacity *= 1 + riseGain
	}
	if a+r+s > 0 {
		if cs.held == 0 {
			cs.held = cs.capacity
		}
		cs.held += (1 - math.Exp(-dt/heldTau.Seconds())) * (cs.capacity - cs.held)
	}
	cs.capa.Store(math.Float64bits(cs.capacity))
	cs.clients.Store(int64(len(slots)))
	active := cs.lastRefused != 0 && nowNs-cs.lastRefused <= int64(quietFor) && cs.capacity >= minCapacity
	if !active && s > 0 && cs.capacity >= minCapacity {
		active = true // still turning clients away: keep sharing until the probe covers them
	}
	if len(slots) < 2 {
		// One client has no one to share with: the mode alone decides
		// what the class admits of it. Sharing here would only refuse
		// what the mode would take while the capacity estimate lags
		// (a start, a farm that grew): work-conserving first.
		active = false
	}
	if !active {
		cs.active.Store(false)
		cs.over.Store(0)
		cs.inRate.Store(0)
		cs.onRate.Store(0)
		cs.level.Store(math.Float64bits(math.Inf(1)))
		for _, m := range slots {
			t.setState(m.slot, stIn, 0)
			t.tk[m.slot].filled = false
		}
		return
	}
	// Max-min fair level: Σ min(rate_c, f) = capacity.
	rates := t.tick.rates[:0]
	for _, m := range slots {
		rates = append(rates, m.rate)
	}
	slices.Sort(rates)
	f := waterLevel(rates, cs.capacity)
	// Within its share by the level of the capacity the class held over
	// the last seconds, if that is higher: a capacity that sank for a
	// moment (a stall: the mode refused while the farm was frozen, and
	// the capacity takes seconds to regain) does not make a client over
	// its share that was within it, and within-share requests are
	// decided as their class (doc.go, Standing).
	fin := f
	if cs.held > cs.capacity {
		fin = waterLevel(rates, cs.held)
	}
	t.tick.rates = rates[:0]
	var in float64
	over := t.tick.over[:0]
	refill, depth := fin*dt, fin*burstWindow.Seconds()
	for _, m := range slots {
		if m.rate <= fin {
			in += m.rate
			// Its bucket: what the last tick allowed less what it sent,
			// refilled at the fair level, at most burstWindow of it; full
			// when the client comes within its share or the class starts
			// to share.
			x := &t.tk[m.slot]
			tokens := depth
			if x.filled && x.kind == stIn {
				tokens = min(depth, max(x.allow-float64(m.n), 0))
			}
			t.setAllow(m.slot, tokens+refill)
			continue
		}
		over = append(over, overEntry{slot: m.slot, key: m.key, rate: m.rate})
	}
	cs.level.Store(math.Float64bits(fin))
	cs.inRate.Store(math.Float64bits(in))
	cs.over.Store(int64(len(over)))
	allow := uint64(allowTicks * TickInterval.Seconds() * min(fin, 1e9))
	cs.allow.Store(allow + 2)
	cs.active.Store(true)
	on := 0.0
	if len(over) > 0 {
		// The turns' budget is sized by what the class admits (never
		// above C), not by a C still rising (its slow start, until the
		// mode's first refusal): what the rise offers goes to the
		// marginal tier, which the mode refuses first, not to turns that
		// compete with the turns already given (doc.go, Turns).
		budget := (1-turnMargin)*cs.admitted - in
		on = t.turns(over, f, budget, cs.capacity-in, probeGain*cs.capacity, dt, nowNs)
	}
	cs.onRate.Store(math.Float64bits(on))
	clear(over)
	t.tick.over = over[:0]
}

// turns gives the over-share clients their turns within budget, and the
// marginal tier to the next ones: what the capacity left to the
// over-share clients (spare) leaves past the turns, and probe past it. It
// returns the turns' rate, the floods' included (doc.go, Turns). Called
// with t.tick held.
func (t *Table) turns(over []overEntry, f, budget, spare, probe, dt float64, nowNs int64) float64 {
	// Each client's place on the circle: its rank by key, spread evenly,
	// turned by the clock. Each time its place passes 0 a new turn is
	// due: f/rate of a period, its fair level's share of its demand,
	// counted in the time it actually had (served).
	// Floods first: each is let through at the fair level, all the time.
	var on float64
	k := 0
	for _, e := range over {
		if e.rate > floodRatio*f {
			t.setState(e.slot, stOn, f/e.rate)
			t.tk[e.slot].flood = true
			on += f
			continue
		}
		over[k] = e
		k++
	}
	over = over[:k]
	slices.SortFunc(over, func(x, y overEntry) int { return cmp.Compare(x.key, y.key) })
	rot := float64(nowNs%int64(t.cfg.Rotate)) / float64(t.cfg.Rotate)
	dRot := dt / t.cfg.Rotate.Seconds() // what the clock turned it since the last tick
	n := float64(len(over))
	for i := range over {
		e := &over[i]
		x := &t.tk[e.slot]
		psi := float64(i)/n + rot
		psi -= math.Floor(psi)
		if x.psi-psi > 0.5 { // passed 0: a new turn (a shift of ranks moves it less)
			x.done = false
		}
		// Moved by more than the clock: a shift of ranks (clients came,
		// left, or crossed f), which does not end a turn (below).
		moved := psi - x.psi - dRot
		moved -= math.Round(moved)
		shifted := math.Abs(moved) > 0.5/n
		x.psi = psi
		// Its turn is the first f/rate of each rotation: over a period
		// it is admitted at the fair level f.
		e.turn = psi * max(e.rate, f) / f // ψ/φ: below 1 in its turn
		// Only a turn given (admitted whole at the last tick) ends one,
		// and only as the clock turns it past its end. Let through as a
		// flood is no turn: a client that stops being one (f rose above
		// rate/floodRatio, as when the capacity is learned low at a
		// start) has had no turn yet; nor is a share of the marginal
		// tier, which a client past a turn as short as a low f makes it
		// may get; nor a turn its place was pushed past by a shift of
		// ranks (clients joining). (Counted as ended turns, at
		// fair100.yaml's start, most clients were "done" until their
		// place came round, up to a rotation later: half as many turns
		// as the capacity holds, the rest spread over the marginal tier;
		// TestTurnsAfterLowStart.)
		inTurn := x.kind == stOn && !x.flood
		x.flood = false
		if e.turn >= 1 && inTurn && !shifted {
			x.done = true // it had its turn, and it ended
		}
		switch {
		case x.done || e.turn >= 1:
			e.group = 2
		case inTurn:
			e.group = 0
		default:
			e.group = 1
		}
	}
	// In their turn: by place, so that the one nearest its turn's end is
	// cut first when the budget shrinks. Due and waiting: the one waiting
	// longest first. Past their turn: the one whose turn ended last
	// first, for what the turns leave (the marginal tier).
	slices.SortFunc(over, func(x, y overEntry) int {
		if c := cmp.Compare(x.group, y.group); c != 0 {
			return c
		}
		if x.group == 1 {
			return cmp.Compare(y.turn, x.turn)
		}
		return cmp.Compare(x.turn, y.turn)
	})
	// Those in their turn keep it within keepSlack over the budget; the
	// others take what is left.
	budget = max(budget-on, 0)
	left := budget * (1 + keepSlack)
	kept := true
	var turns float64
	i := 0
	for ; i < len(over); i++ {
		e := over[i]
		if kept && e.group != 0 {
			kept = false
			left -= budget * keepSlack
		}
		if left < e.rate || e.group == 2 {
			break // past their turns, clients get only the marginal tier
		}
		left -= e.rate
		turns += e.rate
		t.setState(e.slot, stOn, 0)
	}
	on += turns
	// Then the marginal tier: what the capacity leaves past the turns,
	// and the probe past it (nothing while the within-share demand and the
	// turns take more than C, as in a stall), to as few clients as cover
	// it, in the order above (a client cut from its turn as the budget
	// shrank, a due client waiting, then the one whose turn ended last),
	// each let through with the probability its share of it is (doc.go,
	// Turns).
	rest := over[i:]
	left = max(spare-on+probe, 0)
	for rank, e := range rest {
		if left <= 0 {
			t.setState(e.slot, stOff, 0)
			continue
		}
		p := min(1, left/e.rate)
		t.setRanked(e.slot, stPartial, p, rank)
		left -= e.rate // past 0 once p < 1: the last of the tier
	}
	return on
}

// setAllow publishes a within-share slot's allowance for the tick: the
// requests it may send within its share (Share reads it, + 1, from the
// state word's high half).
func (t *Table) setAllow(slot int32, allow float64) {
	if t.keys[slot].Load() != t.tk[slot].key {
		return
	}
	t.state[slot].Store(stIn | uint64(uint32(min(allow, math.MaxUint32-2))+1)<<32)
	x := &t.tk[slot]
	x.kind, x.on = stIn, false
	x.allow, x.filled = allow, true
}

// setState publishes a slot's standing (p: a partial client's pass
// probability).
func (t *Table) setState(slot int32, kind uint8, p float64) { t.setRanked(slot, kind, p, 0) }

// setRanked is setState with a marginal client's rank in the tier
// (Share's third result), in one store.
func (t *Table) setRanked(slot int32, kind uint8, p float64, rank int) {
	if t.keys[slot].Load() != t.tk[slot].key {
		return // taken by another client since the pass: it starts within
	}
	w := uint64(kind)
	switch {
	case kind == stPartial:
		w |= uint64(uint32(min(p, 1)*math.MaxUint32))<<32 | uint64(min(rank, 255))<<8
	case kind == stOn && p > 0 && p < 1: // a flood; 0 is always
		w |= uint64(max(1, uint32(p*math.MaxUint32))) << 32
	}
	t.state[slot].Store(w)
	x := &t.tk[slot]
	x.kind = kind
	x.on = kind == stOn || kind == stPartial
}

// waterLevel is the max-min fair level f of the sorted rates for
// capacity: Σ min(rate, f) = capacity; +Inf when every rate fits.
func waterLevel(sorted []float64, capacity float64) float64 {
	left := capacity
	for i, r := range sorted {
		share := left / float64(len(sorted)-i)
		if r > share {
			return share
		}
		left -= r
	}
	return math.Inf(1)
}
