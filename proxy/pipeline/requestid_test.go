package pipeline

import (
	"regexp"
	"sync"
	"testing"
)

var idRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestIDsRandom: request IDs are 32 hex digits, never repeat, and are not
// a counter: two generators seeded apart share nothing, and no two
// consecutive IDs of one share their first half (the old IDs were a
// process-wide prefix and a counter, which told a client the request
// volume).
func TestIDsRandom(t *testing.T) {
	var g1, g2 IDGen
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 2000; i++ {
		for _, g := range []*IDGen{&g1, &g2} {
			id := string(g.AppendID(nil))
			if !idRe.MatchString(id) {
				t.Fatalf("id %q", id)
			}
			if seen[id] {
				t.Fatalf("id %q came twice", id)
			}
			if prev != "" && id[:16] == prev[:16] {
				t.Fatalf("ids %q and %q share a prefix", prev, id)
			}
			seen[id], prev = true, id
		}
	}
	// Seeded alike, two generators agree (the seed is all there is).
	var a, b IDGen
	a.Seed([32]byte{1})
	b.Seed([32]byte{1})
	if x, y := a.AppendID(nil), b.AppendID(nil); string(x) != string(y) {
		t.Errorf("same seed, ids %q and %q", x, y)
	}
}

// TestIDPoolConcurrent: the pool's IDs are unique across goroutines (run
// it with -race: a generator is never used by two at once).
func TestIDPoolConcurrent(t *testing.T) {
	var p IDPool
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			local := make([]string, 0, 500)
			for i := 0; i < 500; i++ {
				buf = p.AppendID(buf[:0])
				local = append(local, string(buf))
				var tr Trace
				p.StartTrace(&tr)
				local = append(local, string(tr.TraceID()))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if seen[id] {
					t.Errorf("id %q came twice", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
}

// TestIDCounting: the tests' counting generator gives the scripts' IDs.
func TestIDCounting(t *testing.T) {
	var g IDGen
	g.Counting("0123456789abcdef")
	if a, b := g.AppendID(nil), g.AppendID(nil); string(a) != "0123456789abcdef0000000000000001" || string(b) != "0123456789abcdef0000000000000002" {
		t.Errorf("counting ids %q, %q", a, b)
	}
}

func TestIDsNoAllocs(t *testing.T) {
	var g IDGen
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = g.AppendID(buf[:0]) }); n != 0 {
		t.Errorf("%v allocations per IDGen.AppendID, want 0", n)
	}
}
