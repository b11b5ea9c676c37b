package estimator

import (
	"bytes"
	"math"
	"strconv"
	"testing"
	"time"
)

func TestParseServerTiming(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	tests := []struct {
		in   string
		want Timing
		ok   bool
	}{
		{"", Timing{}, false},
		{"cpu;dur=12.5, io;dur=3, queue;dur=0.25", Timing{CPU: ms(12.5), IO: ms(3), Queue: ms(0.25), HasCPU: true, HasIO: true, HasQueue: true}, true},
		{`db;desc="a, b; c";dur=4, CPU ; DUR = 2`, Timing{CPU: ms(2), IO: ms(4), HasCPU: true, HasIO: true}, true},
		{"db;dur=1, db;dur=2, io;dur=3", Timing{IO: ms(6), HasIO: true}, true},
		{`cpu;dur="7"`, Timing{CPU: ms(7), HasCPU: true}, true},
		{"cache;dur=5, total;dur=100", Timing{}, false},
		{"cpu, io;desc=x", Timing{}, false},
		{"cpu;dur=-1, cpu;dur=NaN, cpu;dur=inf, cpu;dur=1e99, cpu;dur=abc", Timing{}, false},
		{"queue;dur=3", Timing{Queue: ms(3), HasQueue: true}, true},
		{`x;desc="unterminated, cpu;dur=5`, Timing{}, false},
		{`cpu;dur=1;dur=9`, Timing{CPU: ms(1), HasCPU: true}, true},
		{`cpux;dur=1, cp;dur=1, queues;dur=1`, Timing{}, false},
	}
	for _, tc := range tests {
		got, ok := ParseServerTiming([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: got %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if s := (Timing{CPU: 2 * time.Millisecond, IO: 4 * time.Millisecond}).S(0.5); s != 4*time.Millisecond {
		t.Errorf("S = %v", s)
	}
}

func TestStripServerTiming(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"cpu;dur=1, io;dur=2, queue;dur=3, db;dur=4", ""},
		{"cache;desc=hit, cpu;dur=1,  total;dur=9 ", "cache;desc=hit, total;dur=9"},
		{`cdn;desc="a, cpu;dur=1";dur=2, CPU;dur=3`, `cdn;desc="a, cpu;dur=1";dur=2`},
		{",, ,a,,", "a"},
		{`db;desc="x", app`, "app"},
	}
	for _, tc := range tests {
		dst := make([]byte, 0, 64)
		if got := StripServerTiming(dst, []byte(tc.in)); string(got) != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
	// Appends after existing content.
	if got := StripServerTiming([]byte("X: "), []byte("a, cpu;dur=1")); string(got) != "X: a" {
		t.Errorf("got %q", got)
	}
}

func TestServerTimingAllocs(t *testing.T) {
	v := []byte(`cpu;dur=12.5, db;dur=3;desc="select, join", queue;dur=0.4, cache;desc=hit`)
	dst := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() {
		ParseServerTiming(v)
		dst = StripServerTiming(dst[:0], v)
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// names lists the metric names of v's entries, in order (empty entries skipped).
func names(v []byte) [][]byte {
	var out [][]byte
	for len(v) > 0 {
		i := entryEnd(v)
		raw := trim(v[:i])
		if i < len(v) {
			i++
		}
		v = v[i:]
		if name, _ := splitEntry(raw); len(raw) > 0 {
			out = append(out, name)
		}
	}
	return out
}

func FuzzServerTiming(f *testing.F) {
	f.Add([]byte("cpu;dur=12.5, io;dur=3, queue;dur=0.25"))
	f.Add([]byte(`cdn;desc="a, cpu;dur=1";dur=2, CPU;dur=3, x`))
	f.Add([]byte(`a;desc="\`))
	f.Add([]byte(`db;dur="1e3", ,;, queue ;dur = 7 ;desc="\"q\""`))
	f.Add([]byte("123456789012345.5"))
	f.Add([]byte("0.000000000000001"))
	f.Fuzz(func(t *testing.T, v []byte) {
		// The hand-written decimal parser agrees with strconv.
		if want, err := strconv.ParseFloat(string(v), 64); err == nil && len(v) > 0 && len(v) <= 32 && !math.IsNaN(want) {
			if got, ok := parseMs(v); !ok || got != want {
				t.Fatalf("parseMs(%q) = %v %v, strconv %v", v, got, ok, want)
			}
		}
		tm, ok := ParseServerTiming(v)
		if ok != (tm.HasCPU || tm.HasIO || tm.HasQueue) {
			t.Fatalf("ok %v with %+v", ok, tm)
		}
		if tm.CPU < 0 || tm.IO < 0 || tm.Queue < 0 {
			t.Fatalf("negative %+v", tm)
		}
		out := StripServerTiming(nil, v)
		if t2, ok2, out2 := ParseStripServerTiming(nil, v); t2 != tm || ok2 != ok || !bytes.Equal(out2, out) {
			t.Fatalf("ParseStrip disagrees on %q", v)
		}
		if _, ok := ParseServerTiming(out); ok {
			t.Fatalf("strip(%q) = %q still has cpu/io/db/queue", v, out)
		}
		// Every other entry is kept, in order.
		var want [][]byte
		for _, n := range names(v) {
			if metricOf(n) == metricOther {
				want = append(want, n)
			}
		}
		got := names(out)
		if len(got) != len(want) {
			t.Fatalf("strip(%q) = %q: kept %q, want %q", v, out, got, want)
		}
		for i := range got {
			if metricOf(got[i]) != metricOther || !bytes.Equal(got[i], want[i]) {
				t.Fatalf("strip(%q) = %q: kept %q, want %q", v, out, got, want)
			}
		}
		if len(out) > len(v)+2*len(want) {
			t.Fatalf("strip grew %q to %q", v, out)
		}
	})
}
