package load

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSeriesAndSummary(t *testing.T) {
	ms := time.Millisecond
	cfg, err := Config{Classes: []Class{
		{Name: "a", SLA: 100 * ms, Open: &Open{Rate: Constant(1, 2*time.Second)}},
		{Name: "b", SLA: time.Second, Open: &Open{Rate: Constant(1, 2*time.Second)}},
	}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Config: cfg, Stop: StopSchedule, Results: []Result{
		{Class: 0, Start: 100 * ms, Latency: 50 * ms, Status: 200},                                 // good
		{Class: 0, Start: 200 * ms, Latency: 900 * ms, Status: 200},                                // late: ends at 1.1s
		{Class: 0, Start: 300 * ms, Latency: 1 * ms, Status: 503, Rejected: true, Reason: "queue"}, // rejected
		{Class: 0, Start: 400 * ms, Err: ErrOverflow},                                              // overflow
		{Class: 1, Start: 500 * ms, Lag: 600 * ms, Latency: 10 * ms, Status: 200},                  // sent in second 1
		{Class: 1, Start: 600 * ms, Latency: 5 * ms, Err: ErrRefused},                              // error
		{Class: 1, Start: 700 * ms, Latency: 20 * ms, Status: 503},                                 // unmarked 503: error
		{Class: 1, Start: 1500 * ms, Latency: 1100 * ms, Err: ErrTimeout},                          // timeout, ends at 2.6s
	}}
	pts := rep.Series(time.Second)
	if len(pts) != 3*3 {
		t.Fatalf("%d points", len(pts))
	}
	get := func(sec int, class string) Point {
		for _, p := range pts {
			if p.T == time.Duration(sec)*time.Second && p.Class == class {
				return p
			}
		}
		t.Fatalf("no point %d %s", sec, class)
		return Point{}
	}
	want := []Point{
		{T: 0, Class: "a", Offered: 4, Overflow: 1, Sent: 3, Completed: 1, Rejected: 1, Goodput: 1, Admitted: 1, P50: 50 * ms, P95: 50 * ms, P99: 50 * ms},
		{T: time.Second, Class: "a", Completed: 1, Admitted: 1, P50: 900 * ms, P95: 900 * ms, P99: 900 * ms},
		{T: 0, Class: "b", Offered: 3, Sent: 2, Errors: 2, Admitted: 1, P50: 20 * ms, P95: 20 * ms, P99: 20 * ms},
		{T: time.Second, Class: "b", Offered: 1, Sent: 2, Completed: 1, Goodput: 1, Admitted: 1, P50: 10 * ms, P95: 10 * ms, P99: 10 * ms},
		{T: 2 * time.Second, Class: "b", Errors: 1, Admitted: 1, P50: 1100 * ms, P95: 1100 * ms, P99: 1100 * ms},
		{T: 0, Class: TotalClass, Offered: 7, Overflow: 1, Sent: 5, Completed: 1, Rejected: 1, Errors: 2, Goodput: 1, Admitted: 2, P50: 20 * ms, P95: 50 * ms, P99: 50 * ms},
	}
	for _, w := range want {
		if got := get(int(w.T/time.Second), w.Class); got != w {
			t.Errorf("point %v %s:\n got %+v\nwant %+v", w.T, w.Class, got, w)
		}
	}

	s := rep.Summary()
	a, _ := s.Class("a")
	b, _ := s.Class("b")
	all, _ := s.Class(TotalClass)
	if a.Offered != 4 || a.Overflow != 1 || a.Sent != 3 || a.Completed != 2 || a.Rejected != 1 || a.Goodput != 1 ||
		a.Reasons["queue"] != 1 || a.ErrKinds[ErrOverflow] != 1 || a.P95 != 900*ms || a.Throughput != 1 {
		t.Errorf("a: %+v", a)
	}
	if b.Errors != 3 || b.ErrKinds[ErrRefused] != 1 || b.ErrKinds[ErrTimeout] != 1 || b.Statuses[503] != 1 ||
		b.Admitted != 3 || b.Max != 1100*ms || b.MaxLag != 600*ms || b.Goodput != 1 {
		t.Errorf("b: %+v", b)
	}
	if all.Offered != 8 || all.Goodput != 2 || all.Duration != 2*time.Second || all.GoodputRate != 1 {
		t.Errorf("all: %+v", all)
	}

	var buf bytes.Buffer
	if err := WriteCSV(&buf, pts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 10 || lines[0] != strings.Join(CSVHeader, ",") ||
		lines[1] != "0,a,4,1,3,1,1,0,1,1,50.000,50.000,50.000" ||
		lines[8] != "2,b,0,0,0,0,0,1,0,1,1100.000,1100.000,1100.000" ||
		lines[7] != "2,a,0,0,0,0,0,0,0,0,,," {
		t.Fatalf("csv:\n%s", buf.String())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              -1,
		"3":                             3 * time.Second,
		" 0 ":                           0,
		"-1":                            -1,
		"soon":                          -1,
		"Wed, 01 Jan 2025 00:00:07 GMT": 7 * time.Second,
		"Tue, 31 Dec 2024 00:00:07 GMT": 0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
