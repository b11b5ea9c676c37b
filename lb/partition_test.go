package lb

import "testing"

// TestPartitionPoolGrows: when the pool grows, every backend already owned
// stays with its owner; only the new ones are assigned, and each to
// exactly one of the sentries.
func TestPartitionPoolGrows(t *testing.T) {
	before, after := addrList(100), addrList(150)
	for i := range 3 {
		pt := Partition{Index: i, Count: 3}
		old := map[string]bool{}
		for _, a := range pt.Filter(before) {
			old[a] = true
		}
		for _, a := range pt.Filter(after) {
			delete(old, a)
		}
		if len(old) != 0 {
			t.Fatalf("sentry %d lost %d backends when the pool grew", i, len(old))
		}
	}
	for _, a := range after[100:] {
		n := 0
		for i := range 3 {
			if (Partition{Index: i, Count: 3}).Owns(a) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s owned by %d sentries", a, n)
		}
	}
}
