package policy

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/adaptive"
	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/batchac"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/sert"
)

// FuzzParse: Parse never panics, and what it returns is coherent: either a
// snapshot that satisfies the invariants the proxy relies on and whose dump
// reads back to the same dump, or a non-empty Errors sorted by line, never
// both.
func FuzzParse(f *testing.F) {
	for _, file := range exampleFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(docsExample(f))
	for _, s := range []string{
		"",
		"apps: [{name: a, backends: {static: [\"h:1\"]}}]",
		"apps:\n  - name: a\n    listen: 127.0.0.1:99999\n    balanse: p2c\n    timeouts: {connect: 250}\n    backends: {static: [\"h:1\"]}\n",
		"x-a: &a {backends: {static: [\"h:1\"]}}\napps: [{<<: *a, name: a}, {<<: *a, name: b, listen: \":9\"}]",
		"apps:\n  - &a\n    name: a\n    <<: *a\n",
		"apps: [{name: a, hosts: [A.com, \"[::1]:80\"], backends: {dns: {name: s, port: 1}}}]",
		"a: [\n",
		"apps: *x",
		"apps:\n  - name: a\n    backends: {static: [\"h:1\"]}\n    classes:\n      - name: gold\n        period: 10ms\n        rules:\n          - {path_prefix: /api/, methods: [GET], key: /api}\n          - {headers: [{name: X-Tier, value: gold}], cookies: [{name: s}]}\n      - name: rest\n        default: true\n",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, classes: [{name: g, rules: [{path_glob: /s/**/*.css, hosts: [\"*.a.com\", \"[::1]\"], networks: [10.0.0.0/8]}, {path_regexp: \"^/i/[0-9]+$\"}]}, {name: d}]}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, classes: [{name: g, rules: [{grpc_service: \"pkg.*\", grpc_method: Get}, {grpc_method: \"[\"}]}, {name: d}]}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, classes: [{name: g}, {name: g, default: true}, {name: h, rules: [{}]}]}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, sla: {percentile: 99, targets: [{below: 10, target: 1s}, {below: 5, target: 1ms}, {target: 2s}]}, estimator: {buckets: [1ms, 2ms], alpha: 0.5}}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, classes: [{name: s, rules: [{path: /s}], terminate: {lower: 100ms, upper: 2s, methods: [get]}}, {name: d}], termination: {alpha: 2, low_water: 0.01, high_water: 0.3, interval: 2s, min_arrivals: 20, max_rise: 1.5}}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, degradation: {enabled: true, header: X-Load}, request_id_header: x_load}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, degradation: {header: te}}, {name: b, listen: \":9\", backends: {static: [\"h:1\"]}, degradation: {enabled: false}}]",
		"apps: [{name: a, backends: {static: [\"h:1\"]}, admission: {mode: threshold, batch: {parallelism: 2}, threshold: {capacity: 1.5}, switch: {cpu_high: 0.9, cpu_low: 0.95}}, server_timing: {strip: false}}]",
	} {
		f.Add([]byte(s))
	}
	for _, s := range adaptiveSeeds {
		f.Add([]byte(s))
	}
	// Parse as if the input were in deploy/examples, so the TLS examples
	// find their files.
	source := filepath.Join("..", "deploy", "examples", "fuzz.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(source, data)
		if err != nil {
			if s != nil {
				t.Fatal("snapshot returned with errors")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			for i, e := range es {
				if e.Msg == "" || e.File != source || e.Line < 0 || e.Column < 0 || e.Column > 0 && e.Line == 0 {
					t.Fatalf("bad error %#v", e)
				}
				if i > 0 && es[i-1].Line > e.Line {
					t.Fatalf("errors not sorted:\n%v", err)
				}
			}
			return
		}
		checkInvariants(t, s)
		// The dump is a policy that reads back to itself.
		out, err := Dump(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Parse(source, out)
		if err != nil {
			t.Fatalf("the dump is not a valid policy:\n%v\n%s", err, out)
		}
		if out2, _ := Dump(s2); !bytes.Equal(out, out2) {
			t.Fatalf("dump → parse → dump differs:\n%s\n---\n%s", out, out2)
		}
	})
}

// checkInvariants checks what the rest of sentry assumes of a snapshot.
func checkInvariants(t *testing.T, s *Snapshot) {
	t.Helper()
	if len(s.Apps) == 0 || len(s.Listeners) == 0 {
		t.Fatalf("valid snapshot with %d apps, %d listeners", len(s.Apps), len(s.Listeners))
	}
	names := map[string]bool{}
	served := map[*App]bool{}
	for _, l := range s.Listeners {
		if len(l.Apps) == 0 {
			t.Fatalf("listener %s has no apps", l.Addr)
		}
		hosts := map[string]bool{}
		for _, a := range l.Apps {
			served[a] = true
			if !sameTLS(a.TLS, l.TLS) {
				t.Fatalf("listener %s: app %s TLS differs", l.Addr, a.Name)
			}
			for _, h := range a.Hosts {
				if hosts[h] {
					t.Fatalf("listener %s: host %s twice", l.Addr, h)
				}
				hosts[h] = true
			}
		}
		if l.Default != nil && len(l.Default.Hosts) != 0 {
			t.Fatalf("listener %s: default app %s has hosts", l.Addr, l.Default.Name)
		}
	}
	for i, a := range s.Apps {
		if a.Index != i || a.Name == "" || names[a.Name] || !served[a] {
			t.Fatalf("app %d %q: bad index, name or not served", i, a.Name)
		}
		names[a.Name] = true
		if (len(a.Backends.Static) == 0) == (a.Backends.DNS == nil) {
			t.Fatalf("app %s: want exactly one of static and dns", a.Name)
		}
		if a.Reject.Status != 503 && a.Reject.Status != 429 {
			t.Fatalf("app %s: reject status %d", a.Name, a.Reject.Status)
		}
		if h := a.Degradation.Header; h == "" || reservedName(h) || sameHeader(h, a.RequestIDHeader) {
			t.Fatalf("app %s: load header %q (request ID %q)", a.Name, h, a.RequestIDHeader)
		}
		if a.Timeouts.Connect <= 0 || a.Timeouts.Response <= 0 || a.MaxConnsPerBackend < 1 {
			t.Fatalf("app %s: bad timeouts or limits", a.Name)
		}
		checkTuning(t, a)
	}
}

// checkTuning checks what the admission code assumes of an app's classes,
// SLA, estimator and admission settings: the libraries accept them, and
// the values are in range.
func checkTuning(t *testing.T, a *App) {
	t.Helper()
	c, err := classify.Compile(a.Classes)
	if err != nil {
		t.Fatalf("app %s: valid snapshot, but classify.Compile: %v", a.Name, err)
	}
	if c.Len() > batchac.MaxClasses {
		t.Fatalf("app %s: %d classes", a.Name, c.Len())
	}
	if _, err := estimator.New(a.Estimator, c.Names()); err != nil {
		t.Fatalf("app %s: valid snapshot, but estimator.New: %v", a.Name, err)
	}
	e := a.Estimator
	if e.HalfLife <= 0 || e.QueueHalfLife <= 0 || e.MaxKeys < 1 || !(e.Alpha > 0) || len(e.Edges) == 0 ||
		e.RateWindow <= 0 || e.RateSmoothing <= 0 || e.Refresh <= 0 || e.ProbeInterval <= 0 {
		t.Fatalf("app %s: estimator %+v", a.Name, e)
	}
	sla := a.SLA
	if !(sla.Percentile > 0 && sla.Percentile < 100) || !(sla.Revenue >= 0) || len(sla.Targets) == 0 {
		t.Fatalf("app %s: sla %+v", a.Name, sla)
	}
	for i, b := range sla.Targets {
		last := i == len(sla.Targets)-1
		if b.Target <= 0 || last != (b.Below == 0) || i > 0 && !last && b.Below <= sla.Targets[i-1].Below {
			t.Fatalf("app %s: sla targets %+v", a.Name, sla.Targets)
		}
	}
	ad := a.Admission
	if _, err := admission.ParseMode(ad.Mode); err != nil {
		t.Fatalf("app %s: %v", a.Name, err)
	}
	if ad.Batch.QueueCap < 1 || ad.Batch.Parallelism != 0 && !(ad.Batch.Parallelism >= 1) ||
		ad.Threshold.Recompute <= 0 || !(ad.Threshold.Capacity >= 0) || math.IsInf(ad.Threshold.Capacity, 0) {
		t.Fatalf("app %s: admission %+v", a.Name, ad)
	}
	sw := ad.Switch
	if !(sw.CPULow > 0 && sw.CPULow < sw.CPUHigh && sw.CPUHigh <= 1) || sw.Hold <= 0 || sw.RevertAfter <= 0 {
		t.Fatalf("app %s: switch %+v", a.Name, sw)
	}
	if _, err := sert.New(a.SertConfig()); err != nil {
		t.Fatalf("app %s: valid snapshot, but sert.New: %v", a.Name, err)
	}
	checkAdaptive(t, a, c.Len())
}

// adaptiveSeeds exercise admission.adaptive and admission.fallback.
var adaptiveSeeds = []string{
	"apps: [{name: a, backends: {static: [\"h:1\"]}, admission: {mode: adaptive, adaptive: {nreq: 10, timeout: 250ms, alpha: 0.5, err_d: 0.1, err_i: -0.4, adj_d: 1.5, adj_i: 3, c_i: -0.2, rate_min: 1, rate_max: 900, adj_lo: 4, lc_thresh: 7, cut_all_lower: true, burst: 1s, initial_rate: 40, rule: paper}}}]",
	"apps: [{name: a, backends: {static: [\"h:1\"]}, admission: {adaptive: {err_d: -0.6, rate_min: 10, rate_max: 5, initial_rate: 3}, fallback: {enabled: false, miss_windows: 0, return_ratio: 1}}}]",
	"apps: [{name: a, backends: {static: [\"h:1\"]}, admission: {mode: auto, fallback: {miss_windows: 2, no_timing_share: 0.9, return_windows: 5, return_ratio: 0.5}}}]",
}

// checkAdaptive: the adaptive settings of a valid snapshot are accepted by
// the controller as they are, one target per class and the SLA's
// percentile, and the fall-back settings are in range.
func checkAdaptive(t *testing.T, a *App, classes int) {
	t.Helper()
	ad := a.Admission.Adaptive
	targets := make([]time.Duration, classes)
	for i := range targets {
		targets[i] = a.SLA.Targets[0].Target
	}
	c, err := adaptive.New(ad.Config(targets, a.SLA.Percentile))
	if err != nil {
		t.Fatalf("app %s: valid snapshot, but adaptive.New: %v", a.Name, err)
	}
	// What runs is what the policy says: no zero was read as a default.
	got := c.Config()
	if got.Alpha != ad.Alpha || got.ErrI != ad.ErrI || got.CI != ad.CI || got.Burst != ad.Burst || got.ErrD != ad.ErrD ||
		got.NReq != ad.NReq || got.RateMin != ad.RateMin || got.RateMax != ad.RateMax || got.Percentile != a.SLA.Percentile {
		t.Fatalf("app %s: adaptive %+v runs as %+v", a.Name, ad, got)
	}
	if ad.InitialRate != 0 && got.InitialRate != ad.InitialRate || ad.InitialRate == 0 && got.InitialRate != ad.RateMax {
		t.Fatalf("app %s: initial rate %v runs as %v", a.Name, ad.InitialRate, got.InitialRate)
	}
	f := a.Admission.Fallback
	if f.MissWindows < 1 || f.ReturnWindows < 1 || !(f.NoTimingShare > 0 && f.NoTimingShare <= 1) || !(f.ReturnRatio > 0 && f.ReturnRatio <= 1) {
		t.Fatalf("app %s: fallback %+v", a.Name, f)
	}
}

// FuzzAdaptive fuzzes the admission.adaptive and admission.fallback
// sections alone: the body of an app's admission mapping, so that the
// fuzzer spends its effort on these keys. Parse never panics, and a valid
// result runs as written (checkAdaptive).
func FuzzAdaptive(f *testing.F) {
	for _, s := range []string{
		"{mode: adaptive}",
		"{adaptive: {nreq: 1, timeout: 1ms, alpha: 0.01, err_i: -1, err_d: 1e6, c_i: -1e6, rate_min: 1e9, rate_max: 1e9}}",
		"{adaptive: {err_d: -0.6}}",
		"{adaptive: {initial_rate: 0, rate_min: 0.5, rate_max: 0.5, burst: 1ms}, fallback: {return_ratio: 1, no_timing_share: 1}}",
		"{adaptive: {alpha: 0}}",
		"{adaptive: {cut_all_lower: yes}}",
		"{adaptive: {shared: true}, mode: adaptive}",
		"{adaptive: {shared: 1}}",
		"{adaptive: {rule: fast}}",
		"{fallback: {enabled: true, miss_windows: 3600}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if bytes.ContainsAny(body, "\n\r&*!%") {
			return // keep the body on its line: no anchors, tags or directives
		}
		src := "apps:\n  - name: a\n    backends: {static: [\"h:1\"]}\n    classes: [{name: g, rules: [{path: /g}]}, {name: s, rules: [{path: /s}]}, {name: b}]\n    admission: " + string(body) + "\n"
		s, err := Parse("fuzz.yaml", []byte(src))
		if err != nil {
			var es Errors
			if s != nil || !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("bad result %v, %T %v", s, err, err)
			}
			for _, e := range es {
				if e.Line < 1 || e.Line > 6 || e.Msg == "" { // a YAML error may point past the end
					t.Fatalf("error %#v outside the policy", e)
				}
			}
			return
		}
		checkInvariants(t, s)
		// The dump is a policy that reads back to itself.
		out, err := Dump(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("the dump is not a valid policy:\n%v\n%s", err, out)
		}
		if out2, _ := Dump(s2); !bytes.Equal(out, out2) {
			t.Fatalf("dump → parse → dump differs:\n%s\n---\n%s", out, out2)
		}
	})
}
