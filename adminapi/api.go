package adminapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/status"
)

// Admission is an app's admission stack as the API drives it
// (control.App).
type Admission interface {
	Mode() admission.Mode
	ConfiguredMode() admission.Mode
	Force(admission.Mode) (admission.Mode, error)
	Unforce() (admission.Mode, bool)
	Forced() (admission.Mode, bool)
}

// Options are the API's collaborators; Logger, Policy and Pool are
// required.
type Options struct {
	// Logger is the root logger: SetLevel acts on it (every named logger
	// shares its level), and the changes are logged on it.
	Logger hclog.Logger
	// Policy returns the policy in force.
	Policy func() *policy.Snapshot
	// Pool returns the backend pool of an app of the policy in force,
	// or nil.
	Pool func(app string) *lb.Pool
	// Admission returns an app's admission stack, or nil (an untyped
	// nil: no stack). Optional: without it, modes cannot be forced.
	Admission func(app string) Admission
	// Now is the clock of the ledger; nil means time.Now.
	Now func() time.Time
}

// Kinds of override.
const (
	KindBackend   = "backend"
	KindLogLevel  = "log_level"
	KindAdmission = "admission"
)

// ModePolicy is the mode (and level) that ends an override: what the
// policy says.
const ModePolicy = "policy"

// ConfigKey is the extension key /config writes the overrides under.
const ConfigKey = "x-runtime-overrides"

// configComment heads ConfigKey in /config.
const configComment = `Runtime overrides in force (the admin API, /runtime; docs/operations.md,
"Runtime control"). Not part of the policy: sentry check ignores x- keys,
and a reload reverts them.`

// API is the runtime API. Its methods are safe for concurrent use.
type API struct {
	opts Options
	log  hclog.Logger
	coop *http.CrossOriginProtection

	mu     sync.Mutex
	ledger map[ledgerKey]status.Override
}

type ledgerKey struct{ kind, app, backend string }

// New returns the API.
func New(opts Options) *API {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &API{opts: opts, log: opts.Logger.Named("admin"), coop: http.NewCrossOriginProtection(), ledger: map[ledgerKey]status.Override{}}
}

// Routes returns the API's routes, as patterns for http.ServeMux.
func (a *API) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"/runtime":           a.route(a.getAll, nil),
		"/runtime/backend":   a.route(a.getBackends, a.postBackend),
		"/runtime/log":       a.route(a.getLog, a.postLog),
		"/runtime/admission": a.route(a.getAdmission, a.postAdmission),
		"/runtime/reset":     a.route(a.getOverrides, a.postReset),
	}
}

// answer is a handler's JSON answer and its status.
type answer struct {
	code int
	body any
}

func ok(body any) answer { return answer{http.StatusOK, body} }

func fail(code int, format string, args ...any) answer {
	return answer{code, map[string]string{"error": fmt.Sprintf(format, args...)}}
}

// peer is who asks: the TCP peer's address and how a change was let in.
type peer struct {
	addr string // host:port, as the log shows it
	auth string // "token" or "loopback"
}

// route serves GET (and HEAD) with get and POST with post (nil: 405).
func (a *API) route(get func(r *http.Request) answer, post func(r *http.Request, p peer) answer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ans answer
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			ans = get(r)
		case http.MethodPost:
			if post == nil {
				w.Header().Set("Allow", "GET, HEAD")
				ans = fail(http.StatusMethodNotAllowed, "%s is read-only: GET it", r.URL.Path)
				break
			}
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			p, refused := a.authorize(w, r)
			switch {
			case refused.code != 0:
				ans = refused
			case r.ParseForm() != nil:
				ans = fail(http.StatusBadRequest, "cannot read the parameters (query or form body)")
			default:
				ans = post(r, p)
			}
		default:
			allow := "GET, HEAD, POST"
			if post == nil {
				allow = "GET, HEAD"
			}
			w.Header().Set("Allow", allow)
			ans = fail(http.StatusMethodNotAllowed, "method %s: use GET to read, POST to change", r.Method)
		}
		body, err := json.MarshalIndent(ans.body, "", "  ")
		if err != nil {
			ans.code, body = http.StatusInternalServerError, []byte(`{"error": "encoding the answer"}`)
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(ans.code)
		if r.Method != http.MethodHead {
			_, _ = w.Write(append(body, '\n'))
		}
	})
}

// authorize applies the rules of a change (doc.go, "Who may change
// things"); refused.code is 0 when the change may go on.
func (a *API) authorize(w http.ResponseWriter, r *http.Request) (p peer, refused answer) {
	p.addr = r.RemoteAddr
	if err := a.coop.Check(r); err != nil {
		a.log.Warn("runtime change refused: a browser's cross-origin request", "by", p.addr, "path", r.URL.Path)
		return p, fail(http.StatusForbidden, "cross-origin request refused")
	}
	if tok := a.opts.Policy().Admin.Token; tok.IsSet() {
		given, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !found || !tok.Equal([]byte(strings.TrimSpace(given))) {
			errParam := ""
			if found {
				errParam = `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sentry admin"`+errParam)
			a.log.Warn("runtime change refused: no valid token", "by", p.addr, "path", r.URL.Path, "token_given", found)
			return p, fail(http.StatusUnauthorized, "send the token of admin.token_file: Authorization: Bearer TOKEN")
		}
		p.auth = "token"
		return p, answer{}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		a.log.Warn("runtime change refused: not a loopback peer and no admin.token_file", "by", p.addr, "path", r.URL.Path)
		return p, fail(http.StatusForbidden, "changes from %s are refused: without admin.token_file only loopback peers may change anything", r.RemoteAddr)
	}
	p.auth = "loopback"
	return p, answer{}
}

// ---------------------------------------------------------------- state

// BackendState is one backend as GET shows it.
type BackendState struct {
	App     string `json:"app"`
	Backend string `json:"backend"`
	// State is enabled, draining or disabled.
	State string `json:"state"`
	// Drained: out of rotation with nothing in flight.
	Drained  bool  `json:"drained"`
	Healthy  bool  `json:"healthy"`
	Inflight int64 `json:"inflight"`
}

// AppMode is an app's admission mode as GET shows it.
type AppMode struct {
	App string `json:"app"`
	// Mode is the mode in force; Policy the policy's admission.mode.
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	Forced bool   `json:"forced"`
}

// LogLevel is the log level in force and the policy's.
type LogLevel struct {
	Level  string `json:"level"`
	Policy string `json:"policy"`
}

// State is GET /runtime's answer.
type State struct {
	Overrides []status.Override `json:"overrides"`
	Log       LogLevel          `json:"log"`
	Admission []AppMode         `json:"admission"`
	Backends  []BackendState    `json:"backends"`
	// Auth says what a change needs: "token" (admin.token_file) or
	// "loopback" (a loopback peer).
	Auth string `json:"auth"`
}

func (a *API) getAll(*http.Request) answer {
	auth := "loopback"
	if a.opts.Policy().Admin.Token.IsSet() {
		auth = "token"
	}
	return ok(State{Overrides: a.Overrides(), Log: a.logLevel(), Admission: a.modes(""), Backends: a.backends("", ""), Auth: auth})
}

func (a *API) getBackends(r *http.Request) answer {
	return ok(a.backends(r.FormValue("app"), r.FormValue("backend")))
}

func (a *API) getLog(*http.Request) answer { return ok(a.logLevel()) }

func (a *API) getAdmission(r *http.Request) answer { return ok(a.modes(r.FormValue("app"))) }

func (a *API) getOverrides(*http.Request) answer {
	return ok(map[string]any{"overrides": a.Overrides()})
}

// backends lists the backends of app ("": every app), only addr's when
// addr is not "".
func (a *API) backends(app, addr string) []BackendState {
	out := []BackendState{}
	for _, ac := range a.opts.Policy().Apps {
		if app != "" && ac.Name != app {
			continue
		}
		p := a.opts.Pool(ac.Name)
		if p == nil {
			continue
		}
		for _, b := range p.Backends() {
			if addr != "" && b.Addr() != addr {
				continue
			}
			out = append(out, backendState(ac.Name, b))
		}
	}
	return out
}

func backendState(app string, b *lb.Backend) BackendState {
	return BackendState{App: app, Backend: b.Addr(), State: b.State().String(), Drained: b.Drained(), Healthy: b.Healthy(), Inflight: b.Inflight()}
}

func (a *API) modes(app string) []AppMode {
	out := []AppMode{}
	if a.opts.Admission == nil {
		return out
	}
	for _, ac := range a.opts.Policy().Apps {
		if app != "" && ac.Name != app {
			continue
		}
		if st := a.opts.Admission(ac.Name); st != nil {
			_, forced := st.Forced()
			out = append(out, AppMode{App: ac.Name, Mode: st.Mode().String(), Policy: st.ConfiguredMode().String(), Forced: forced})
		}
	}
	return out
}

func (a *API) logLevel() LogLevel {
	return LogLevel{Level: levelName(a.opts.Logger.GetLevel()), Policy: a.opts.Policy().Log.Level}
}

// levelName names an hclog level as the policy does.
func levelName(l hclog.Level) string {
	switch l {
	case hclog.Trace:
		return "trace"
	case hclog.Debug:
		return "debug"
	case hclog.Info:
		return "info"
	case hclog.Warn:
		return "warn"
	case hclog.Error:
		return "error"
	case hclog.Off:
		return "off"
	}
	return l.String()
}

// ---------------------------------------------------------------- changes

// backendVerbs maps POST /runtime/backend's state to lb's.
var backendVerbs = map[string]lb.State{"drain": lb.Draining, "disable": lb.Disabled, "enable": lb.Enabled}

func (a *API) postBackend(r *http.Request, p peer) answer {
	app, addr, verb := r.FormValue("app"), r.FormValue("backend"), r.FormValue("state")
	to, known := backendVerbs[verb]
	switch {
	case addr == "":
		return fail(http.StatusBadRequest, "backend=ADDR is required (as the policy or DNS gives it, e.g. 10.0.0.2:8080)")
	case !known:
		return fail(http.StatusBadRequest, "state=%q: want drain, disable or enable", verb)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var done []BackendState
	appKnown := app == ""
	for _, ac := range a.opts.Policy().Apps {
		if app != "" && ac.Name != app {
			continue
		}
		appKnown = true
		pool := a.opts.Pool(ac.Name)
		if pool == nil {
			continue
		}
		b := pool.Backend(addr)
		if b == nil {
			continue
		}
		// Logged first, so that the pool's "backend drained" follows it.
		// (States change only here and in revert, under a.mu.)
		prev := b.State()
		if prev != to {
			a.log.Info("runtime override: backend state", "app", ac.Name, "backend", addr, "from", prev.String(), "to", to.String(), "by", p.addr, "auth", p.auth)
		}
		if _, member := pool.SetState(addr, to); !member {
			continue // left the pool meanwhile (DNS)
		}
		k := ledgerKey{KindBackend, ac.Name, addr}
		if to == lb.Enabled {
			delete(a.ledger, k)
		} else if prev != to {
			a.ledger[k] = a.entry(KindBackend, ac.Name, addr, to.String(), lb.Enabled.String(), p)
		}
		done = append(done, backendState(ac.Name, pool.Backend(addr)))
	}
	switch {
	case !appKnown:
		return fail(http.StatusNotFound, "no app %q in the policy in force", app)
	case len(done) == 0 && app != "":
		return fail(http.StatusNotFound, "app %q has no backend %q (GET /runtime/backend?app=%s lists them)", app, addr, app)
	case len(done) == 0:
		return fail(http.StatusNotFound, "no app has a backend %q (GET /runtime/backend lists them)", addr)
	}
	return ok(map[string]any{"backends": done})
}

// levels are the levels POST /runtime/log takes, as the policy names them.
var levels = map[string]hclog.Level{"trace": hclog.Trace, "debug": hclog.Debug, "info": hclog.Info, "warn": hclog.Warn, "error": hclog.Error}

func (a *API) postLog(r *http.Request, p peer) answer {
	name := r.FormValue("level")
	pol := a.opts.Policy().Log.Level
	if name == ModePolicy {
		name = pol
	}
	to, known := levels[name]
	if !known {
		return fail(http.StatusBadRequest, "level=%q: want trace, debug, info, warn, error or policy", r.FormValue("level"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setLevel(to, p.addr, p.auth)
	k := ledgerKey{kind: KindLogLevel}
	if name == pol {
		delete(a.ledger, k)
	} else {
		a.ledger[k] = a.entry(KindLogLevel, "", "", name, pol, p)
	}
	return ok(a.logLevel())
}

// setLevel sets the root logger's level and logs the change at INFO on
// the side of it where INFO passes (before when the new level hides it,
// after otherwise). a.mu held.
func (a *API) setLevel(to hclog.Level, by, auth string) {
	from := a.opts.Logger.GetLevel()
	if from == to {
		return
	}
	kv := []any{"from", levelName(from), "to", levelName(to), "by", by}
	if auth != "" {
		kv = append(kv, "auth", auth)
	}
	if to > hclog.Info {
		a.log.Info("runtime override: log level", kv...)
		a.opts.Logger.SetLevel(to)
		return
	}
	a.opts.Logger.SetLevel(to)
	a.log.Info("runtime override: log level", kv...)
}

// modeNames are the modes POST /runtime/admission takes.
var modeNames = map[string]admission.Mode{"batch": admission.ModeBatch, "threshold": admission.ModeThreshold, "adaptive": admission.ModeAdaptive, "off": admission.ModeOff}

func (a *API) postAdmission(r *http.Request, p peer) answer {
	if a.opts.Admission == nil {
		return fail(http.StatusNotImplemented, "this sentry has no admission stacks to drive")
	}
	app, name := r.FormValue("app"), r.FormValue("mode")
	to, known := modeNames[name]
	if !known && name != ModePolicy {
		return fail(http.StatusBadRequest, "mode=%q: want batch, threshold, adaptive, off or policy (the policy's mode; auto is one only there)", name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var done []AppMode
	for _, ac := range a.opts.Policy().Apps {
		if app != "" && ac.Name != app {
			continue
		}
		st := a.opts.Admission(ac.Name)
		if st == nil {
			continue
		}
		k := ledgerKey{KindAdmission, ac.Name, ""}
		pol := st.ConfiguredMode()
		if name == ModePolicy || to == pol {
			// What the policy says (a forced mode equal to a configured
			// one is no override).
			if from, was := st.Unforce(); was {
				a.log.Info("runtime override: admission mode", "app", ac.Name, "from", from.String(), "to", st.Mode().String()+" (policy)", "by", p.addr, "auth", p.auth)
			}
			delete(a.ledger, k)
		} else {
			prevForced, was := st.Forced()
			from, err := st.Force(to)
			if err != nil {
				return fail(http.StatusInternalServerError, "app %s: %v", ac.Name, err)
			}
			if !was || prevForced != to {
				a.log.Info("runtime override: admission mode", "app", ac.Name, "from", from.String(), "to", to.String(), "policy", pol.String(), "by", p.addr, "auth", p.auth)
				a.ledger[k] = a.entry(KindAdmission, ac.Name, "", to.String(), pol.String(), p)
			}
		}
		_, forced := st.Forced()
		done = append(done, AppMode{App: ac.Name, Mode: st.Mode().String(), Policy: pol.String(), Forced: forced})
	}
	if len(done) == 0 {
		return fail(http.StatusNotFound, "no app %q in the policy in force", app)
	}
	return ok(map[string]any{"admission": done})
}

func (a *API) postReset(_ *http.Request, p peer) answer {
	n := a.revert(p.addr, p.auth)
	return ok(map[string]any{"reverted": n, "overrides": a.Overrides()})
}

// Revert undoes every override, logging each with by=reason: what the
// daemon calls after a reload that applied, so that the new policy is
// what runs. It walks the live state, not only the ledger: every backend
// out of rotation, every forced mode and a log level other than the
// policy's. It returns how many it undid.
func (a *API) Revert(reason string) int { return a.revert(reason, "") }

func (a *API) revert(by, auth string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	kv := func(kv ...any) []any {
		kv = append(kv, "by", by)
		if auth != "" {
			kv = append(kv, "auth", auth)
		}
		return kv
	}
	snap := a.opts.Policy()
	undone := map[ledgerKey]bool{}
	for _, ac := range snap.Apps {
		if pool := a.opts.Pool(ac.Name); pool != nil {
			for _, b := range pool.Backends() {
				if prev := b.State(); prev != lb.Enabled {
					pool.SetState(b.Addr(), lb.Enabled)
					a.log.Info("runtime override reverted: backend state", kv("app", ac.Name, "backend", b.Addr(), "from", prev.String(), "to", lb.Enabled.String())...)
					undone[ledgerKey{KindBackend, ac.Name, b.Addr()}] = true
					n++
				}
			}
		}
		if a.opts.Admission == nil {
			continue
		}
		if st := a.opts.Admission(ac.Name); st != nil {
			if from, was := st.Unforce(); was {
				a.log.Info("runtime override reverted: admission mode", kv("app", ac.Name, "from", from.String(), "to", st.Mode().String())...)
				undone[ledgerKey{KindAdmission, ac.Name, ""}] = true
				n++
			}
		}
	}
	if lvl, known := levels[snap.Log.Level]; known && a.opts.Logger.GetLevel() != lvl {
		a.setLevel(lvl, by, auth)
		undone[ledgerKey{kind: KindLogLevel}] = true
		n++
	}
	// What ended without the walk's help -- a backend gone from the pool,
	// an app gone from the policy, a mode switch the reload rebuilt -- is
	// said too, so that the log tells of the end of every override.
	for k, o := range a.ledger {
		if !undone[k] {
			a.log.Info("runtime override ended", kv("kind", k.kind, "app", k.app, "backend", k.backend, "was", o.Value)...)
		}
	}
	clear(a.ledger)
	return n
}

func (a *API) entry(kind, app, backend, value, pol string, p peer) status.Override {
	return status.Override{Kind: kind, App: app, Backend: backend, Value: value, Policy: pol, By: p.addr, At: a.opts.Now().UTC().Format(time.RFC3339)}
}

// Overrides returns the overrides in force, oldest first: the ledger,
// read against the live state (an entry whose backend left the pool, or
// whose force a reload's rebuilt switch ended, is dropped), with the log
// level's as the logger has it.
func (a *API) Overrides() []status.Override {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []status.Override{}
	for k, o := range a.ledger {
		if !a.live(k, o) {
			delete(a.ledger, k)
			continue
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(x, y status.Override) int {
		return cmp.Or(cmp.Compare(x.At, y.At), cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.App, y.App), cmp.Compare(x.Backend, y.Backend))
	})
	return out
}

// live tells whether a ledger entry is still in force. a.mu held.
func (a *API) live(k ledgerKey, o status.Override) bool {
	switch k.kind {
	case KindBackend:
		pool := a.opts.Pool(k.app)
		if pool == nil {
			return false
		}
		b := pool.Backend(k.backend)
		return b != nil && b.State().String() == o.Value
	case KindAdmission:
		if a.opts.Admission == nil {
			return false
		}
		st := a.opts.Admission(k.app)
		if st == nil {
			return false
		}
		m, forced := st.Forced()
		return forced && m.String() == o.Value
	case KindLogLevel:
		return levelName(a.opts.Logger.GetLevel()) == o.Value
	}
	return false
}

// Config is the admin listener's /config: the policy in force (Dump),
// followed, when overrides are in force, by ConfigKey holding them.
func (a *API) Config() ([]byte, error) {
	snap := a.opts.Policy()
	ov := a.Overrides()
	if len(ov) == 0 {
		return policy.Dump(snap)
	}
	return policy.DumpExtension(snap, ConfigKey, configComment, ov)
}
