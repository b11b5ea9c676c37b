package lb

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// owners returns, for each address of addrs, the index of the sentry out
// of k that owns it, failing unless every address is owned exactly once.
func owners(t *testing.T, addrs []string, k int) map[string]int {
	t.Helper()
	owner := map[string]int{}
	for i := range k {
		for _, a := range (Partition{Index: i, Count: k}).Filter(addrs) {
			if prev, dup := owner[a]; dup {
				t.Fatalf("k=%d: %s owned by %d and %d", k, a, prev, i)
			}
			owner[a] = i
		}
	}
	if len(owner) != len(addrs) {
		t.Fatalf("k=%d: %d of %d addresses owned", k, len(owner), len(addrs))
	}
	return owner
}

// TestPartitionBalanced: every backend is owned by exactly one sentry, the
// shares differ by at most one (so no sentry is empty while there are as
// many backends as sentries), and the split depends on the set of
// addresses only, not on their order or repeats.
func TestPartitionBalanced(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 40; n++ {
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("10.%d.%d.%d:%d", r.IntN(256), r.IntN(256), r.IntN(256), 1024+r.IntN(60000))
		}
		for k := 1; k <= 7; k++ {
			owner := owners(t, addrs, k)
			sizes := make([]int, k)
			for _, i := range owner {
				sizes[i]++
			}
			for i, s := range sizes {
				if s < n/k || s > (n+k-1)/k {
					t.Fatalf("n=%d k=%d: sentry %d owns %d (sizes %v)", n, k, i, s, sizes)
				}
			}
			shuffled := append([]string(nil), addrs...)
			r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			shuffled = append(shuffled, addrs[0])
			for i := range k {
				for _, a := range (Partition{Index: i, Count: k}).Filter(shuffled) {
					if owner[a] != i {
						t.Fatalf("n=%d k=%d: reordered, %s went from %d to %d", n, k, a, owner[a], i)
					}
				}
			}
		}
	}
}

// TestPartitionStability: changes move few backends. Going from 3 to 4
// sentries moves about a quarter of them (the least any split can), and a
// pool growing from 100 to 150 keeps most owners.
func TestPartitionStability(t *testing.T) {
	addrs := addrList(200)
	three, four := owners(t, addrs, 3), owners(t, addrs, 4)
	moved := 0
	for _, a := range addrs {
		if three[a] != four[a] {
			moved++
		}
	}
	t.Logf("3 → 4 sentries: %d of 200 backends moved (50 at least)", moved)
	if moved < 50 || moved > 80 {
		t.Errorf("3 → 4 sentries moved %d of 200, want about 50", moved)
	}
	before, after := owners(t, addrs[:100], 3), owners(t, addrs[:150], 3)
	kept := 0
	for a, i := range before {
		if after[a] == i {
			kept++
		}
	}
	t.Logf("100 → 150 backends: %d of the 100 kept their owner", kept)
	if kept < 85 {
		t.Errorf("100 → 150 backends: only %d of 100 kept their owner", kept)
	}
}
