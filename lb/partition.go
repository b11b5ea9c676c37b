package lb

// Owns reports whether the sentry with this partition owns addr: of all
// indexes 0..Count-1, Index scores highest for addr (rendezvous hashing;
// ties go to the lower index).
func (pt Partition) Owns(addr string) bool {
	if pt.Count <= 1 {
		return true
	}
	h := fnv64a(addr)
	best, bestScore := 0, uint64(0)
	for i := 0; i < pt.Count; i++ {
		if s := mix64(h ^ (uint64(i)+1)*0x9e3779b97f4a7c15); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best == pt.Index
}

// Filter returns the addresses of addrs that this partition owns, in order.
// It returns addrs itself when the partition owns everything.
func (pt Partition) Filter(addrs []string) []string {
	if pt.Count <= 1 {
		return addrs
	}
	out := make([]string, 0, len(addrs)/pt.Count+1)
	for _, a := range addrs {
		if pt.Owns(a) {
			out = append(out, a)
		}
	}
	return out
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
