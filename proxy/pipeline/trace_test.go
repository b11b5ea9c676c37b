package pipeline

import (
	"regexp"
	"strings"
	"testing"
)

// TestTraceRead is the traceparent grammar (Trace Context §3.2, §4.3)
// case by case.
func TestTraceRead(t *testing.T) {
	const id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{"00-" + id + "-" + parent + "-01", true},
		{"00-" + id + "-" + parent + "-00", true},
		{"00-" + id + "-" + parent + "-ff", true}, // unknown flags are carried, not refused
		{" 00-" + id + "-" + parent + "-01\t", true},
		{"01-" + id + "-" + parent + "-01", true},                       // a later version, as 00
		{"cc-" + id + "-" + parent + "-01-and-more", true},              // a later version's extra fields
		{"cc-" + id + "-" + parent + "-01x", false},                     // ... only after a '-'
		{"00-" + id + "-" + parent + "-01-", false},                     // version 00 has nothing after the flags
		{"ff-" + id + "-" + parent + "-01", false},                      // version ff is invalid
		{"0g-" + id + "-" + parent + "-01", false},                      // not hex
		{"00-" + strings.ToUpper(id) + "-" + parent + "-01", false},     // upper case
		{"00-" + id + "-" + strings.ToUpper(parent) + "-01", false},     // upper case
		{"00-" + id + "-" + parent + "-0A", false},                      // upper case flags
		{"00-" + strings.Repeat("0", 32) + "-" + parent + "-01", false}, // zero trace-id
		{"00-" + id + "-" + strings.Repeat("0", 16) + "-01", false},     // zero parent-id
		{"00-" + id[:31] + "-" + parent + "-01", false},                 // short trace-id
		{"00-" + id + "-" + parent + "1-01", false},                     // long parent-id
		{"00_" + id + "-" + parent + "-01", false},
		{"00-" + id + "_" + parent + "-01", false},
		{"00-" + id + "-" + parent + "_01", false},
		{"", false},
		{"00", false},
	} {
		var tr Trace
		if got := tr.Read([]byte(c.v)); got != c.ok || tr.Valid() != c.ok {
			t.Errorf("Read(%q) = %v (Valid %v), want %v", c.v, got, tr.Valid(), c.ok)
			continue
		}
		if c.ok {
			if string(tr.TraceID()) != id || tr.SpanID() != nil || tr.Started() {
				t.Errorf("Read(%q): trace %q span %q started %v", c.v, tr.TraceID(), tr.SpanID(), tr.Started())
			}
		} else if tr.TraceID() != nil {
			t.Errorf("Read(%q): invalid, but trace %q", c.v, tr.TraceID())
		}
	}
	// An invalid value leaves no trace of an earlier valid one.
	var tr Trace
	tr.Read([]byte("00-" + id + "-" + parent + "-01"))
	if tr.Read([]byte("junk")) || tr.Valid() {
		t.Error("an invalid Read kept the earlier trace")
	}
}

var startedRe = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)

// TestTraceStart: a started trace is a valid traceparent (it reads back),
// sampled, with the ids it reports, and fresh each time.
func TestTraceStart(t *testing.T) {
	var g IDGen
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		var tr Trace
		tr.Start(&g)
		h := string(tr.Header())
		if !startedRe.MatchString(h) || !tr.Started() || !tr.Valid() {
			t.Fatalf("started %q (started %v)", h, tr.Started())
		}
		if string(tr.TraceID()) != h[3:35] || string(tr.SpanID()) != h[36:52] {
			t.Fatalf("%q: ids %q %q", h, tr.TraceID(), tr.SpanID())
		}
		var back Trace
		if !back.Read(tr.Header()) || string(back.TraceID()) != string(tr.TraceID()) {
			t.Fatalf("%q does not read back", h)
		}
		if seen[h[3:35]] || seen[h[36:52]] {
			t.Fatalf("%q: an id came twice", h)
		}
		seen[h[3:35]], seen[h[36:52]] = true, true
	}
}

// TestTraceNoAllocs: reading and starting a trace allocate nothing.
func TestTraceNoAllocs(t *testing.T) {
	var g IDGen
	var tr Trace
	v := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if n := testing.AllocsPerRun(100, func() {
		tr.Read(v)
		tr.Start(&g)
		_ = tr.TraceID()
	}); n != 0 {
		t.Errorf("%v allocations per Read and Start, want 0", n)
	}
}

// FuzzTraceparent: Read never panics; what it takes is the grammar's
// (checked by a second, plain reading of it), and a taken value's ids are
// the value's own.
func FuzzTraceparent(f *testing.F) {
	for _, s := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
		"", "-", "00-",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		var tr Trace
		ok := tr.Read(v)
		want := plainTraceparent(strings.Trim(string(v), " \t"))
		if ok != want {
			t.Fatalf("Read(%q) = %v, the grammar says %v", v, ok, want)
		}
		if ok && !strings.Contains(string(v), string(tr.TraceID())) {
			t.Fatalf("Read(%q): trace-id %q is not the value's", v, tr.TraceID())
		}
	})
}

// plainTraceparent is the grammar written the slow, obvious way.
func plainTraceparent(s string) bool {
	parts := strings.SplitN(s, "-", 5)
	if len(parts) < 4 {
		return false
	}
	isHex := func(x string, n int) bool {
		if len(x) != n {
			return false
		}
		for _, c := range x {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
		return true
	}
	ver, id, parent, flags := parts[0], parts[1], parts[2], parts[3]
	if !isHex(ver, 2) || ver == "ff" || !isHex(id, 32) || !isHex(parent, 16) || !isHex(flags, 2) {
		return false
	}
	if id == strings.Repeat("0", 32) || parent == strings.Repeat("0", 16) {
		return false
	}
	if ver == "00" {
		return len(parts) == 4
	}
	return true // a later version: anything after a '-'
}
