package fairshare

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"
)

// Client is one entry of the table as the status page shows it: never a
// metric label.
type Client struct {
	// Class is the class's name.
	Class string
	// Addr is the address of the client's first request in its slot (with
	// an identity from a header, cookie or claim, one of its addresses).
	Addr netip.Addr
	// Key is the client key's first 32 bits in hex, which names a client
	// identified by a header, a cookie or a claim without showing it.
	Key string
	// Rate and Admitted are its smoothed arrival and admission rates,
	// requests per second.
	Rate, Admitted float64
	// Standing is "within", "turn", "marginal" or "waiting" (over its
	// share, with its turn, the one partly admitted, or without a turn).
	Standing string
	// Since is when the client took its slot.
	Since time.Time
}

var standings = [...]string{stIn: "within", stOn: "turn", stPartial: "marginal", stOff: "waiting"}

// Top returns the clients with the highest arrival rates, at most 10, as
// of the last Tick that refreshed them (about once a second).
func (t *Table) Top() []Client {
	if p := t.top.Load(); p != nil {
		return *p
	}
	return nil
}

// publishTop picks the top talkers. Called with t.tick held.
func (t *Table) publishTop(nowNs int64) {
	type cand struct {
		slot int
		rate float64
	}
	var buf [topN + 1]cand
	top := buf[:0]
	for b := 0; b < int(t.buckets); b++ {
		for s := b * Ways; s < b*Ways+Ways; s++ {
			if t.keys[s].Load() == 0 || t.tk[s].key == 0 {
				continue
			}
			rate := float64(t.score[s].Load()) / 1000
			if rate <= 0 || (len(top) == topN && rate <= top[topN-1].rate) {
				continue
			}
			i, _ := slices.BinarySearchFunc(top, rate, func(c cand, r float64) int { return -cmp.Compare(c.rate, r) })
			top = slices.Insert(top, i, cand{s, rate})
			if len(top) > topN {
				top = top[:topN]
			}
		}
	}
	out := make([]Client, 0, len(top))
	for _, c := range top {
		mu := &t.locks[c.slot/Ways]
		mu.Lock()
		co := t.cold[c.slot]
		key := t.keys[c.slot].Load()
		mu.Unlock()
		if key == 0 || int(co.class) >= len(t.cfg.Classes) {
			continue
		}
		cl := Client{
			Class: t.cfg.Classes[co.class], Rate: co.rate, Admitted: co.adm,
			Standing: standings[t.tk[c.slot].kind&3], Since: time.Unix(0, co.since),
			Key: hex8(uint32(t.tk[c.slot].key >> 32)),
		}
		if co.some {
			cl.Addr = netip.AddrFrom16(co.addr)
			if co.v4 {
				cl.Addr = cl.Addr.Unmap()
			}
		}
		out = append(out, cl)
	}
	t.top.Store(&out)
}

func hex8(x uint32) string {
	const digits = "0123456789abcdef"
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = digits[x&15]
		x >>= 4
	}
	return string(b[:])
}

// ClassStats is one class's sharing state, for metrics.
type ClassStats struct {
	// Clients active in the class (a request within the last 10 s) and
	// those over their fair share.
	Clients, Over int
	// Sharing: the class is shedding and shares its capacity.
	Sharing bool
	// Level is the fair level a client is within its share by (f, or
	// that of the held capacity while the capacity dipped; doc.go,
	// Standing), requests per second per client (+Inf while every client
	// fits); Capacity the admitted rate it shares.
	Level, Capacity float64
	// ShedOver and ShedWithin count the class's refusals of clients over
	// their share and within it, cumulative.
	ShedOver, ShedWithin uint64
}

// Stats returns each class's state, in class order.
func (t *Table) Stats() []ClassStats {
	out := make([]ClassStats, len(t.classes))
	for i, cs := range t.classes {
		out[i] = ClassStats{
			Clients: int(cs.clients.Load()), Over: int(cs.over.Load()), Sharing: cs.active.Load(),
			Level: math.Float64frombits(cs.level.Load()), Capacity: math.Float64frombits(cs.capa.Load()),
			ShedOver: cs.shedOver.Load(), ShedWithin: cs.shedIn.Load(),
		}
	}
	return out
}
