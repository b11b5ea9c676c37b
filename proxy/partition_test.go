package proxy

import (
	"io"
	"net/http"
	"testing"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
)

// TestPartitionSplitsBackends: two sentries with partition {count: 2} and
// indexes 0 and 1 in front of the same four backends each relay to their
// own share only; the shares are disjoint and cover the four.
func TestPartitionSplitsBackends(t *testing.T) {
	var bes []string
	for i := 0; i < 4; i++ {
		name := string(rune('a' + i))
		bes = append(bes, backend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
	}
	seen := map[string]int{} // backend name → sentry index
	for idx := 0; idx < 2; idx++ {
		h := startProxy(t, bes, func(_ *policy.Snapshot, a *policy.App) {
			a.Partition = policy.Partition{Index: idx, Count: 2}
		})
		// The ports are random: a share may be empty (1 in 8 runs for
		// four backends); that sentry then has no backend to relay to.
		if len(lb.Partition{Index: idx, Count: 2}.Filter(bes)) == 0 {
			resp, err := http.Get("http://" + h.addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("sentry %d owns no backend but answered %d", idx, resp.StatusCode)
			}
			continue
		}
		mine := map[string]bool{}
		for i := 0; i < 40; i++ {
			resp, err := http.Get("http://" + h.addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("sentry %d: %d %q", idx, resp.StatusCode, b)
			}
			mine[string(b)] = true
		}
		for name := range mine {
			if other, dup := seen[name]; dup {
				t.Errorf("backend %s served both sentry %d and %d", name, other, idx)
			}
			seen[name] = idx
		}
	}
	if len(seen) != 4 {
		t.Errorf("the two shares cover %d of 4 backends: %v", len(seen), seen)
	}
}
