package lb

import (
	"cmp"
	"slices"
)

// Filter returns the addresses of addrs that this partition owns, in
// order. It returns addrs itself when the partition owns everything.
//
// The split is rendezvous hashing with quotas: every sentry computes the
// same assignment from the same address set (the order and duplicates of
// addrs do not matter), without coordination. Sentry i's quota is
// ⌊n/k⌋, plus one for the first n mod k indexes, so the shares differ by
// at most one backend and no sentry is left with none while there are at
// least as many backends as sentries. Pure rendezvous hashing moves even
// less on a change, but on small farms its shares are uneven: with 6
// backends and 3 sentries one sentry owns nothing about one time in four,
// and rejects all of its traffic. Addresses are placed strongest
// preference first (the highest score any sentry gives them), each with
// the highest-scoring sentry that still has room, so most backends go
// where pure rendezvous hashing would put them and a change of the set or
// of the count moves few others (TestPartitionStability).
func (pt Partition) Filter(addrs []string) []string {
	if pt.Count <= 1 {
		return addrs
	}
	owned := pt.assign(addrs)
	out := make([]string, 0, len(owned))
	for _, a := range addrs {
		if _, ok := owned[a]; ok {
			out = append(out, a)
		}
	}
	return out
}

// assign returns the set of addresses of addrs that pt.Index owns.
func (pt Partition) assign(addrs []string) map[string]struct{} {
	type pref struct {
		addr string
		h    uint64
		best uint64
	}
	k := pt.Count
	seen := make(map[string]struct{}, len(addrs))
	prefs := make([]pref, 0, len(addrs))
	for _, a := range addrs {
		if _, dup := seen[a]; dup {
			continue
		}
		seen[a] = struct{}{}
		h := fnv64a(a)
		var best uint64
		for i := 0; i < k; i++ {
			best = max(best, score(h, i))
		}
		prefs = append(prefs, pref{a, h, best})
	}
	slices.SortFunc(prefs, func(x, y pref) int {
		if c := cmp.Compare(y.best, x.best); c != 0 {
			return c
		}
		return cmp.Compare(x.addr, y.addr)
	})
	n := len(prefs)
	room := make([]int, k)
	for i := range room {
		room[i] = n / k
		if i < n%k {
			room[i]++
		}
	}
	owned := make(map[string]struct{}, room[min(pt.Index, k-1)])
	for _, p := range prefs {
		who, whoScore := -1, uint64(0)
		for i := 0; i < k; i++ {
			if room[i] == 0 {
				continue
			}
			if s := score(p.h, i); who < 0 || s > whoScore {
				who, whoScore = i, s
			}
		}
		room[who]--
		if who == pt.Index {
			owned[p.addr] = struct{}{}
		}
	}
	return owned
}

// score is sentry i's rendezvous score for an address hashing to h.
func score(h uint64, i int) uint64 {
	return mix64(h ^ (uint64(i)+1)*0x9e3779b97f4a7c15)
}

func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is the splitmix64 finaliser: a bijective avalanche of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
