// Package status is sentry's live status page: one small self-contained
// HTML page on the admin listener (/status) that polls a JSON summary of
// the metrics (/status.json) every second and draws per-class admission
// and backend load on <canvas>, with no external resources at all.
//
// The JSON is built at request time by gathering the Prometheus registry
// and picking sentry's own families; counters stay cumulative (the page,
// and WriteText for a terminal, take per-second differences between two
// snapshots), gauges are as last exported.
//
// Mount it on the admin mux with Routes, or serve Handler on /status,
// /status.json and / (which redirects to /status).
package status

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"html"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sentry-proxy/sentry/policy"
)

// Options tune the page.
type Options struct {
	// Title heads the page. Default "sentry".
	Title string
	// Interval is how often the page polls /status.json. Default 1s.
	Interval time.Duration
	// Policy returns the policy in force; optional. It gives the apps' and
	// classes' order (most important class first) and the SLA percentile.
	// Without it apps and classes are sorted by name and the percentile is
	// taken to be 95 (the policy default).
	Policy func() *policy.Snapshot
	// Overrides returns the runtime overrides in force (package
	// adminapi); optional.
	Overrides func() []Override
	// TopClients returns each app's top talkers by app name (package
	// fairshare, through package control); optional. They are on the
	// page only, never metric labels.
	TopClients func() map[string][]TopClient
}

// TopClient is one of an app's busiest clients (package fairshare):
// shown on the status page, never a metric label.
type TopClient struct {
	Class string `json:"class"`
	// Client names the client: an address it sent from and "#" and the
	// first 32 bits of its key in hex, which tells apart clients named by
	// a header, cookie or claim behind one address (the value is never
	// shown).
	Client string `json:"client"`
	// Rate and Admitted are its smoothed arrival and admission rates,
	// requests per second.
	Rate     float64 `json:"rate"`
	Admitted float64 `json:"admitted"`
	// Standing is within (its fair share), turn (over it, with its
	// turn), marginal or waiting (over it, without a turn).
	Standing string `json:"standing"`
}

// Snapshot is the body of /status.json.
type Snapshot struct {
	// Time is when the registry was gathered, Unix seconds.
	Time float64 `json:"time"`
	Apps []App   `json:"apps"`
	// Logs are sentry's log writers (sentry_log_*), by name ("access",
	// "process"), sorted; empty when none exports.
	Logs []Log `json:"logs"`
	// Overrides are the operator's runtime overrides in force (the admin
	// API), oldest first; empty when none.
	Overrides []Override `json:"overrides"`
}

// Override is one runtime override of the policy (package adminapi): a
// backend drained or disabled, the log level, an app's admission mode.
// A reload reverts it.
type Override struct {
	// Kind is backend, log_level or admission.
	Kind    string `json:"kind" yaml:"kind"`
	App     string `json:"app,omitempty" yaml:"app,omitempty"`
	Backend string `json:"backend,omitempty" yaml:"backend,omitempty"`
	// Value is what is in force (draining, debug, off ...); Policy what
	// the policy says (enabled, info, auto ...).
	Value  string `json:"value" yaml:"value"`
	Policy string `json:"policy" yaml:"policy"`
	// By is the peer address of whoever asked; At when (RFC 3339, UTC).
	By string `json:"by" yaml:"by"`
	At string `json:"at" yaml:"at"`
}

// Log is one log writer's state (internal/logwriter). A stuck reader
// shows as a StalledSeconds that grows; serving is not affected, and
// /healthz does not fail for it (docs/operations.md, Logs).
type Log struct {
	Name string `json:"name"`
	// StalledSeconds is how long the current write to the output has been
	// blocked; 0 when the writer is idle.
	StalledSeconds float64 `json:"stalled_seconds"`
	// BufferedBytes are waiting to be written.
	BufferedBytes float64 `json:"buffered_bytes"`
	// Dropped lines, cumulative: the buffer was full or the output failed.
	Dropped float64 `json:"dropped"`
}

// App is one app's state.
type App struct {
	Name string `json:"name"`
	// Mode is the admission mode in force (batch, threshold, adaptive, off); empty
	// when the app exports no admission metrics.
	Mode string `json:"mode"`
	// Percentile is the SLA percentile the targets apply to (e.g. 95).
	Percentile float64 `json:"percentile"`
	// TargetSeconds is the current response-time target R_sla.
	TargetSeconds float64 `json:"target_seconds"`
	// AdmittedSeconds is the admitted requests' percentile, all classes.
	AdmittedSeconds float64 `json:"admitted_seconds"`
	// CPU is sentry's CPU utilisation as the mode switch sees it; absent
	// when unknown.
	CPU *float64 `json:"cpu,omitempty"`
	// Requests answered, cumulative (relayed, rejected and errors).
	Requests float64   `json:"requests"`
	Classes  []Class   `json:"classes"`
	Backends []Backend `json:"backends"`
	// TopClients are its busiest clients, highest rate first (at most 10;
	// empty without fair sharing).
	TopClients []TopClient `json:"top_clients"`
}

// Class is one priority class of an app.
type Class struct {
	Name string `json:"name"`
	// Decisions are admission decisions by verdict ("admitted",
	// "rejected_test", ...), cumulative.
	Decisions map[string]float64 `json:"decisions"`
	// ArrivalRate is the smoothed arrival rate sentry measures (req/s).
	ArrivalRate float64 `json:"arrival_rate"`
	// PercentileSeconds is the admitted requests' SLA percentile over the
	// last interval; 0 when none completed.
	PercentileSeconds float64 `json:"percentile_seconds"`
}

// Backend is one backend of an app.
type Backend struct {
	Addr    string `json:"addr"`
	Healthy bool   `json:"healthy"`
	// State is the operator's: enabled, draining or disabled
	// (sentry_backend_state); "" when not exported.
	State    string  `json:"state"`
	Inflight float64 `json:"inflight"`
	// Requests relayed to it, cumulative.
	Requests float64 `json:"requests"`
}

// Admitted is the verdict of an admitted request.
const Admitted = "admitted"

// Collect gathers g and builds a snapshot.
func Collect(g prometheus.Gatherer, opts Options) (*Snapshot, error) {
	now := time.Now()
	mfs, err := g.Gather()
	if len(mfs) == 0 && err != nil {
		return nil, err
	}
	b := builder{apps: map[string]*App{}, logs: map[string]*Log{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "sentry_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			b.add(name, m)
		}
	}
	var snap *policy.Snapshot
	if opts.Policy != nil {
		snap = opts.Policy()
	}
	out := b.finish(now, snap)
	if opts.TopClients != nil {
		top := opts.TopClients()
		for i := range out.Apps {
			if t := top[out.Apps[i].Name]; len(t) > 0 {
				out.Apps[i].TopClients = t
			}
		}
	}
	if opts.Overrides != nil {
		out.Overrides = opts.Overrides()
	}
	if out.Overrides == nil {
		out.Overrides = []Override{}
	}
	return out, nil
}

type builder struct {
	apps    map[string]*App
	logs    map[string]*Log
	classes map[[2]string]*Class
	bes     map[[2]string]*Backend
}

func (b *builder) app(name string) *App {
	a := b.apps[name]
	if a == nil {
		a = &App{Name: name}
		b.apps[name] = a
	}
	return a
}

func (b *builder) class(app, name string) *Class {
	if b.classes == nil {
		b.classes = map[[2]string]*Class{}
	}
	k := [2]string{app, name}
	c := b.classes[k]
	if c == nil {
		b.app(app)
		c = &Class{Name: name, Decisions: map[string]float64{}}
		b.classes[k] = c
	}
	return c
}

func (b *builder) backend(app, addr string) *Backend {
	if b.bes == nil {
		b.bes = map[[2]string]*Backend{}
	}
	k := [2]string{app, addr}
	be := b.bes[k]
	if be == nil {
		b.app(app)
		be = &Backend{Addr: addr}
		b.bes[k] = be
	}
	return be
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

func (b *builder) add(family string, m *dto.Metric) {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	app, v := l["app"], value(m)
	if name := l["log"]; name != "" {
		lg := b.logs[name]
		if lg == nil {
			lg = &Log{Name: name}
			b.logs[name] = lg
		}
		switch family {
		case "sentry_log_output_stalled_seconds":
			lg.StalledSeconds = v
		case "sentry_log_buffered_bytes":
			lg.BufferedBytes = v
		case "sentry_log_lines_dropped_total":
			lg.Dropped += v
		}
		return
	}
	if app == "" {
		return
	}
	switch family {
	case "sentry_admission_decisions_total":
		b.class(app, l["class"]).Decisions[l["verdict"]] += v
	case "sentry_estimator_arrival_rate":
		b.class(app, l["class"]).ArrivalRate = v
	case "sentry_class_admitted_percentile_seconds":
		b.class(app, l["class"]).PercentileSeconds = v
	case "sentry_sla_target_seconds":
		b.app(app).TargetSeconds = v
	case "sentry_sla_admitted_percentile_seconds":
		b.app(app).AdmittedSeconds = v
	case "sentry_admission_mode":
		if v == 1 {
			b.app(app).Mode = l["mode"]
		}
	case "sentry_cpu_utilization_ratio":
		b.app(app).CPU = &v
	case "sentry_requests_total":
		b.app(app).Requests += v
		if be := l["backend"]; be != "" && be != "none" {
			b.backend(app, be).Requests += v
		}
	case "sentry_backend_inflight":
		b.backend(app, l["backend"]).Inflight = v
	case "sentry_backend_healthy":
		b.backend(app, l["backend"]).Healthy = v == 1
	case "sentry_backend_state":
		if v == 1 {
			b.backend(app, l["backend"]).State = l["state"]
		}
	}
}

// finish orders apps and classes as the policy does (known ones first),
// the rest by name.
func (b *builder) finish(now time.Time, snap *policy.Snapshot) *Snapshot {
	appRank := map[string]int{}
	classRank := map[[2]string]int{}
	pct := map[string]float64{}
	if snap != nil {
		for i, a := range snap.Apps {
			appRank[a.Name] = i + 1
			pct[a.Name] = a.SLA.Percentile
			for j, c := range a.Classes {
				classRank[[2]string{a.Name, c.Name}] = j + 1
			}
		}
	}
	rank := func(r int) int {
		if r == 0 {
			return 1 << 30
		}
		return r
	}
	out := &Snapshot{Time: float64(now.UnixMilli()) / 1000, Apps: []App{}, Logs: []Log{}}
	for _, lg := range b.logs {
		out.Logs = append(out.Logs, *lg)
	}
	slices.SortFunc(out.Logs, func(x, y Log) int { return cmp.Compare(x.Name, y.Name) })
	for _, a := range b.apps {
		a.Percentile = pct[a.Name]
		if a.Percentile <= 0 || a.Percentile >= 100 {
			a.Percentile = 95
		}
		a.Classes, a.Backends, a.TopClients = []Class{}, []Backend{}, []TopClient{}
		out.Apps = append(out.Apps, *a)
	}
	slices.SortFunc(out.Apps, func(x, y App) int {
		return cmp.Or(cmp.Compare(rank(appRank[x.Name]), rank(appRank[y.Name])), cmp.Compare(x.Name, y.Name))
	})
	idx := map[string]int{}
	for i, a := range out.Apps {
		idx[a.Name] = i
	}
	for k, c := range b.classes {
		a := &out.Apps[idx[k[0]]]
		a.Classes = append(a.Classes, *c)
	}
	for k, be := range b.bes {
		a := &out.Apps[idx[k[0]]]
		a.Backends = append(a.Backends, *be)
	}
	for i := range out.Apps {
		a := &out.Apps[i]
		slices.SortFunc(a.Classes, func(x, y Class) int {
			rx, ry := rank(classRank[[2]string{a.Name, x.Name}]), rank(classRank[[2]string{a.Name, y.Name}])
			return cmp.Or(cmp.Compare(rx, ry), cmp.Compare(x.Name, y.Name))
		})
		slices.SortFunc(a.Backends, func(x, y Backend) int { return cmp.Compare(x.Addr, y.Addr) })
	}
	return out
}

//go:embed page.html
var pageHTML string

// Routes returns the admin routes of the status page: /status,
// /status.json and / (exactly; it redirects to /status), as patterns for
// http.ServeMux.
func Routes(g prometheus.Gatherer, opts Options) map[string]http.Handler {
	h := Handler(g, opts)
	return map[string]http.Handler{"/status": h, "/status.json": h, "/{$}": h}
}

// Handler serves /status (the page), /status.json (a Snapshot) and /
// (a redirect to /status); any other path is 404.
func Handler(g prometheus.Gatherer, opts Options) http.Handler {
	if opts.Title == "" {
		opts.Title = "sentry"
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	page := []byte(strings.NewReplacer(
		"{{TITLE}}", html.EscapeString(opts.Title),
		"{{INTERVAL}}", strconv.FormatInt(opts.Interval.Milliseconds(), 10),
	).Replace(pageHTML))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		hd := w.Header()
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Content-Type-Options", "nosniff")
		switch r.URL.Path {
		case "/", "":
			http.Redirect(w, r, "/status", http.StatusFound)
		case "/status":
			hd.Set("Content-Type", "text/html; charset=utf-8")
			// The page loads nothing from anywhere but this listener.
			hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "+
				"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
			hd.Set("Content-Length", strconv.Itoa(len(page)))
			if r.Method == http.MethodGet {
				_, _ = w.Write(page)
			}
		case "/status.json":
			s, err := Collect(g, opts)
			if err != nil {
				http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
				return
			}
			body, err := json.Marshal(s)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			body = append(body, '\n')
			hd.Set("Content-Type", "application/json")
			hd.Set("Content-Length", strconv.Itoa(len(body)))
			if r.Method == http.MethodGet {
				_, _ = w.Write(body)
			}
		default:
			http.NotFound(w, r)
		}
	})
}
