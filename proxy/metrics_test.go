package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy/pipeline"
)

// seriesWith counts the series of metric name whose labels include every
// "k=\"v\"" in want, in the registry's exposition.
func seriesWith(t *testing.T, h *harness, name string, want ...string) int {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&b, "%s=%q ", l.GetName(), l.GetValue())
			}
			for _, w := range want {
				if !strings.Contains(b.String(), w) {
					continue next
				}
			}
			n++
		}
	}
	return n
}

// TestRemovedBackendSeriesGone: after a reload swaps one backend for
// another, the old backend's sentry_requests_total series are gone at the
// next scrape, the new one's come; after a reload that removes an app,
// none of its series stay.
func TestRemovedBackendSeriesGone(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }
	b1, b2 := backend(t, ok), backend(t, ok)
	a1, a2 := strings.TrimPrefix(b1, "http://"), strings.TrimPrefix(b2, "http://")
	h := startProxy(t, []string{a1}, nil)
	get := func() {
		resp, err := http.Get(h.url("/"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get()
	if n := seriesWith(t, h, "sentry_requests_total", `backend="`+a1+`"`); n == 0 {
		t.Fatalf("no series for %s before the reload", a1)
	}
	swap := testSnap(h.addr, []string{a2}, nil)
	if err := h.p.Apply(swap); err != nil {
		t.Fatal(err)
	}
	get()
	if n := seriesWith(t, h, "sentry_requests_total", `backend="`+a1+`"`); n != 0 {
		t.Errorf("%d series of the removed backend %s after the reload", n, a1)
	}
	if n := seriesWith(t, h, "sentry_requests_total", `backend="`+a2+`"`, `code="2xx"`); n != 1 {
		t.Errorf("%d 2xx series of the new backend %s", n, a2)
	}
	// Rename the app: every series of "web" goes.
	renamed := testSnap(h.addr, []string{a2}, func(_ *policy.Snapshot, a *policy.App) { a.Name = "shop" })
	if err := h.p.Apply(renamed); err != nil {
		t.Fatal(err)
	}
	get()
	for _, name := range []string{"sentry_requests_total", "sentry_request_duration_seconds", "sentry_admitted_duration_seconds", "sentry_admission_decisions_total"} {
		if n := seriesWith(t, h, name, `app="web"`); n != 0 {
			t.Errorf("%d %s series of the removed app", n, name)
		}
	}
	if n := seriesWith(t, h, "sentry_requests_total", `app="shop"`, `backend="`+a2+`"`); n == 0 {
		t.Error("no series for the new app")
	}
}

// TestAdmittedHistogramByClass: relayed requests land in their class's
// sentry_admitted_duration_seconds histogram; rejections in none.
func TestAdmittedHistogramByClass(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	h := startControlled(t, &fakeControl{}, strings.TrimPrefix(be, "http://"))
	c := &http.Client{}
	for _, class := range []string{"gold", "gold", "bronze", "bronze", "bronze"} {
		getWith(t, c, h.url("/x"), class)
	}
	gold := h.p.metrics.admitted.WithLabelValues("web", "gold")
	bronze := h.p.metrics.admitted.WithLabelValues("web", "bronze")
	if n := testutil.CollectAndCount(h.p.metrics.admitted); n != 2 {
		t.Errorf("%d admitted-latency series, want 2 (gold, bronze)", n)
	}
	if got := sampleCount(t, gold); got != 2 {
		t.Errorf("gold count %d, want 2", got)
	}
	if got := sampleCount(t, bronze); got != 0 {
		t.Errorf("bronze count %d, want 0: rejections are not in the latency of admitted requests", got)
	}
}

func getWith(t *testing.T, c *http.Client, url, class string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("User-Agent", "probe/1.0")
	req.Header.Set("Referer", "http://ref.example/x")
	req.Header.Set("X-Class", class)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// sampleCount is a histogram's observation count.
func sampleCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// renamedControl is fakeControl with class names a test can change
// between reloads.
type renamedControl struct {
	*fakeControl
	names []string
}

func (r *renamedControl) Build(*policy.App, *lb.Pool) (pipeline.Controller, error) { return r, nil }
func (r *renamedControl) Classes() []string                                        { return r.names }

// TestRemovedClassSeriesGone: a reload whose app no longer has a class
// removes that class's admitted-latency and decision series; the others
// stay.
func TestRemovedClassSeriesGone(t *testing.T) {
	be := backend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	ctl := &renamedControl{fakeControl: &fakeControl{}, names: []string{"gold", "bronze"}}
	mod := func(_ *policy.Snapshot, a *policy.App) { a.Admission.Mode = "batch" }
	h := startProxyOpts(t, []string{strings.TrimPrefix(be, "http://")}, Options{Control: ctl}, mod)
	getWith(t, &http.Client{}, h.url("/"), "gold")
	if n := seriesWith(t, h, "sentry_admission_decisions_total", `class="bronze"`); n == 0 {
		t.Fatal("no bronze series before the reload")
	}
	ctl.names = []string{"gold", "silver"}
	if err := h.p.Apply(testSnap(h.addr, []string{strings.TrimPrefix(be, "http://")}, mod)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sentry_admission_decisions_total", "sentry_admitted_duration_seconds"} {
		if n := seriesWith(t, h, name, `class="bronze"`); n != 0 {
			t.Errorf("%d %s series of the removed class", n, name)
		}
		if n := seriesWith(t, h, name, `class="gold"`); n == 0 {
			t.Errorf("the kept class's %s series went too", name)
		}
	}
}
