package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"gopkg.in/yaml.v3"
)

// PeerNames are the peers Run knows, in the order summaries list them.
var PeerNames = []string{"sentry", "off", "haproxy", "nginx", "limiter", "sentry-noterm", "haproxy-timeout", "sentry-nodegrade",
	"sentry-auto", "sentry-batch", "sentry-adaptive", "sentry-shared"}

// IsSentryPeer reports whether the named peer runs the sentry binary.
func IsSentryPeer(name string) bool {
	_, ok := sentryVariants[name]
	return ok
}

// sentryVariants are the peers that run sentry, each a change of the
// scenario's sentry fragment:
//
//   - sentry: the fragment as written;
//   - off: admission replaced by {mode: off}, a plain relay;
//   - sentry-noterm: every class's terminate left out;
//   - sentry-nodegrade: the degradation section left out;
//   - sentry-auto, sentry-batch, sentry-adaptive: admission.mode set to
//     auto, batch or adaptive, the rest of the admission section kept
//     (one scenario, every mode, in one run);
//   - sentry-shared: adaptive mode with admission.adaptive.shared: true,
//     one controller for every class (the SEDA paper's baseline).
var sentryVariants = map[string]sentryVariant{
	"sentry":           {},
	"off":              {off: true},
	"sentry-noterm":    {noTerm: true},
	"sentry-nodegrade": {noDegrade: true},
	"sentry-auto":      {mode: "auto"},
	"sentry-batch":     {mode: "batch"},
	"sentry-adaptive":  {mode: "adaptive"},
	"sentry-shared":    {mode: "adaptive", shared: true},
}

// sentryVariant is how a sentry peer changes the scenario's fragment.
type sentryVariant struct {
	off       bool
	noTerm    bool   // the classes' terminate settings left out
	noDegrade bool   // the degradation section left out (the signal off, its default)
	mode      string // admission.mode, when set
	shared    bool   // admission.adaptive.shared: true
}

// Peer is a proxy put in front of the farm.
type Peer interface {
	// Name is the peer's name (its output directory).
	Name() string
	// Available returns nil, or why the peer cannot run here (a missing
	// binary): the runner then skips it with that message.
	Available() error
	// Start runs the peer in front of the farm and returns when it
	// answers. The peer writes its configuration and log into env.Dir.
	Start(ctx context.Context, env PeerEnv) (Running, error)
	// MarksRejects reports whether the peer's rejections carry
	// X-Sentry-Reject. If not, its plain 503s count as rejections
	// (reason PeerRejectReason).
	MarksRejects() bool
}

// Upgrader is a running peer that can upgrade its binary in place (an
// upgrade event).
type Upgrader interface {
	// Upgrade starts the upgrade and returns once the new process is
	// ready, or why it failed.
	Upgrade(ctx context.Context) error
}

// Running is a started peer.
type Running interface {
	// Addr is host:port the load goes to.
	Addr() string
	// Collect saves whatever the peer can tell after the run (sentry's
	// metrics) into the peer's directory. Best effort.
	Collect(ctx context.Context)
	// Stop stops the peer and waits for it to exit.
	Stop()
}

// PeerEnv is what a peer needs to start.
type PeerEnv struct {
	Dir      string
	Scenario *Scenario
	// Backends are the farm servers' host:port.
	Backends []string
}

// NewPeer returns the named peer. sentryBin is the sentry binary (for
// sentry and off).
func NewPeer(name, sentryBin string) (Peer, error) {
	if v, ok := sentryVariants[name]; ok {
		return &sentryPeer{bin: sentryBin, name: name, v: v}, nil
	}
	switch name {
	case "haproxy":
		return haproxyPeer{}, nil
	case "haproxy-timeout":
		return haproxyPeer{cut: true}, nil
	case "nginx":
		return nginxPeer{}, nil
	case "limiter":
		return limiterPeer{}, nil
	}
	return nil, fmt.Errorf("unknown peer %q (want %s)", name, strings.Join(PeerNames, ", "))
}

// ---- sentry and off ----

type sentryPeer struct {
	bin  string
	name string
	v    sentryVariant
}

func (p *sentryPeer) Name() string { return p.name }

func (p *sentryPeer) MarksRejects() bool { return true }

func (p *sentryPeer) Available() error {
	if p.bin == "" {
		return fmt.Errorf("no sentry binary given")
	}
	if _, err := os.Stat(p.bin); err != nil {
		return fmt.Errorf("sentry binary: %w", err)
	}
	return nil
}

// SentryPolicy builds the policy the peer runs: the scenario's fragment in
// an app the runner owns (listen, backends), admin on adminAddr. With off,
// the fragment's admission section is replaced by {mode: off}.
func SentryPolicy(sc *Scenario, listen, adminAddr string, backends []string, off bool) ([]byte, error) {
	if off {
		return sentryPolicy(sc, listen, adminAddr, backends, "off")
	}
	return sentryPolicy(sc, listen, adminAddr, backends, "sentry")
}

// SentryPolicyNoTerm is SentryPolicy without early termination: every
// class's terminate setting is left out (peer sentry-noterm, the
// comparison the termination scenarios make).
func SentryPolicyNoTerm(sc *Scenario, listen, adminAddr string, backends []string) ([]byte, error) {
	return sentryPolicy(sc, listen, adminAddr, backends, "sentry-noterm")
}

// SentryPolicyNoDegrade is SentryPolicy without the degradation signal:
// the app's degradation section is left out (peer sentry-nodegrade).
func SentryPolicyNoDegrade(sc *Scenario, listen, adminAddr string, backends []string) ([]byte, error) {
	return sentryPolicy(sc, listen, adminAddr, backends, "sentry-nodegrade")
}

// SentryPolicyFor is the policy of the named sentry peer (IsSentryPeer).
func SentryPolicyFor(peer string, sc *Scenario, listen, adminAddr string, backends []string) ([]byte, error) {
	if !IsSentryPeer(peer) {
		return nil, fmt.Errorf("%q is not a sentry peer", peer)
	}
	return sentryPolicy(sc, listen, adminAddr, backends, peer)
}

func sentryPolicy(sc *Scenario, listen, adminAddr string, backends []string, peer string) ([]byte, error) {
	v := sentryVariants[peer]
	off, noTerm, noDegrade := v.off, v.noTerm, v.noDegrade
	kv := func(k string, v *yaml.Node) []*yaml.Node {
		return []*yaml.Node{{Kind: yaml.ScalarNode, Value: k}, v}
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }
	mapping := func(kvs ...[]*yaml.Node) *yaml.Node {
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, p := range kvs {
			n.Content = append(n.Content, p...)
		}
		return n
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, b := range backends {
		seq.Content = append(seq.Content, str(b))
	}
	app := mapping(
		kv("name", str(sc.Name)),
		kv("listen", str(listen)),
		kv("backends", mapping(kv("static", seq))),
	)
	sawAdmission := false
	if sc.Sentry.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(sc.Sentry.Content); i += 2 {
			k, v := sc.Sentry.Content[i], sc.Sentry.Content[i+1]
			if off && k.Value == "admission" {
				sawAdmission = true
				v = mapping(kv("mode", &yaml.Node{Kind: yaml.ScalarNode, Value: "off", Style: yaml.DoubleQuotedStyle}))
			}
			if noTerm && k.Value == "classes" {
				v = withoutKey(v, "terminate")
			}
			if noDegrade && k.Value == "degradation" {
				continue
			}
			app.Content = append(app.Content, k, v)
		}
	}
	if off && !sawAdmission {
		app.Content = append(app.Content, kv("admission", mapping(kv("mode", &yaml.Node{Kind: yaml.ScalarNode, Value: "off", Style: yaml.DoubleQuotedStyle})))...)
	}
	if v.mode != "" {
		setKey(app, str(v.mode), "admission", "mode")
	}
	if v.shared {
		setKey(app, str("true"), "admission", "adaptive", "shared")
	}
	root := mapping(
		kv("admin", mapping(kv("listen", str(adminAddr)))),
		kv("log", mapping(kv("level", str(logLevel())))),
		kv("server", mapping(kv("shutdown_timeout", str("5s")))),
		kv("apps", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{app}}),
	)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Generated by the scenario runner for %s (peer %s).\n", sc.Name, peer)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, err
	}
	enc.Close()
	return buf.Bytes(), nil
}

func (p *sentryPeer) Start(ctx context.Context, env PeerEnv) (Running, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pol, err := sentryPolicy(env.Scenario, listen, admin, env.Backends, p.name)
	if err != nil {
		return nil, err
	}
	polPath := filepath.Join(env.Dir, "policy.yaml")
	if err := os.WriteFile(polPath, pol, 0o644); err != nil {
		return nil, err
	}
	if err := checkPolicy(ctx, p.bin, env.Scenario, polPath); err != nil {
		return nil, err
	}
	proc, err := startProcess(filepath.Join(env.Dir, "peer.log"), p.bin, "run", "-config", polPath,
		"-pidfile", filepath.Join(env.Dir, "sentry.pid"))
	if err != nil {
		return nil, err
	}
	r := &sentryRunning{proc: proc, addr: listen, admin: admin, dir: env.Dir, bin: p.bin, pidfile: filepath.Join(env.Dir, "sentry.pid")}
	if err := waitReady(ctx, proc, "http://"+admin+"/readyz", 10*time.Second); err != nil {
		r.Stop()
		return nil, fmt.Errorf("sentry: %w (log: %s)", err, filepath.Join(env.Dir, "peer.log"))
	}
	if err := waitReady(ctx, proc, "http://"+listen+"/healthz", 10*time.Second); err != nil {
		r.Stop()
		return nil, fmt.Errorf("sentry: %w", err)
	}
	return r, nil
}

// setKey sets the value at the path of keys under the mapping m, making
// the mappings on the way (copies: the scenario's fragment is shared by
// every peer) and replacing whatever was there.
func setKey(m *yaml.Node, val *yaml.Node, keys ...string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != keys[0] {
			continue
		}
		if len(keys) == 1 {
			m.Content[i+1] = val
			return
		}
		child := m.Content[i+1]
		cp := &yaml.Node{Kind: yaml.MappingNode}
		if child.Kind == yaml.MappingNode {
			cp.Content = append([]*yaml.Node(nil), child.Content...)
		}
		m.Content[i+1] = cp
		setKey(cp, val, keys[1:]...)
		return
	}
	if len(keys) == 1 {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: keys[0]}, val)
		return
	}
	child := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: keys[0]}, child)
	setKey(child, val, keys[1:]...)
}

// withoutKey returns a copy of the sequence of mappings seq in which no
// mapping has key.
func withoutKey(seq *yaml.Node, key string) *yaml.Node {
	if seq.Kind != yaml.SequenceNode {
		return seq
	}
	out := *seq
	out.Content = nil
	for _, item := range seq.Content {
		if item.Kind != yaml.MappingNode {
			out.Content = append(out.Content, item)
			continue
		}
		m := *item
		m.Content = nil
		for i := 0; i+1 < len(item.Content); i += 2 {
			if item.Content[i].Value != key {
				m.Content = append(m.Content, item.Content[i], item.Content[i+1])
			}
		}
		out.Content = append(out.Content, &m)
	}
	return &out
}

func checkPolicy(ctx context.Context, bin string, sc *Scenario, polPath string) error {
	if out, err := exec.CommandContext(ctx, bin, "check", "-config", polPath).CombinedOutput(); err != nil {
		return fmt.Errorf("the policy generated from %s (sentry: line %d) does not pass sentry check:\n%s", sc.Source, sc.Sentry.Line, strings.TrimSpace(string(out)))
	}
	return nil
}

// CheckSentry generates the sentry peer's policy (and the off peer's) with
// placeholder addresses and runs `sentry check` on it.
func CheckSentry(ctx context.Context, bin string, sc *Scenario) error {
	dir, err := os.MkdirTemp("", "scenario-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, off := range []bool{false, true} {
		pol, err := SentryPolicy(sc, "127.0.0.1:18080", "127.0.0.1:19901", []string{"127.0.0.1:18081"}, off)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(path, pol, 0o644); err != nil {
			return err
		}
		if err := checkPolicy(ctx, bin, sc, path); err != nil {
			return err
		}
	}
	return nil
}

type sentryRunning struct {
	proc             *process
	addr, admin, dir string
	bin, pidfile     string
}

// Upgrade is a binary upgrade of the running sentry, with the same binary,
// through `sentry upgrade` (SIGUSR2, then the wait for the new process);
// its output goes to the peer's log directory.
func (r *sentryRunning) Upgrade(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, r.bin, "upgrade", "-pidfile", r.pidfile, "-timeout", "30s").CombinedOutput()
	_ = os.WriteFile(filepath.Join(r.dir, "upgrade.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (r *sentryRunning) Addr() string { return r.addr }

func (r *sentryRunning) Collect(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.admin+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	_ = os.WriteFile(filepath.Join(r.dir, "metrics.txt"), b, 0o644)
}

// Stop stops the serving process -- after an upgrade event, the one the
// PID file names, a child of the first -- then the first, and its group.
func (r *sentryRunning) Stop() {
	if b, err := os.ReadFile(r.pidfile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && pid != r.proc.cmd.Process.Pid {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for i := 0; i < 160 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	r.proc.stop(syscall.SIGTERM, 8*time.Second)
}

// ---- haproxy ----

// haproxyPeer is HAProxy as an expert configures it for the farm; with
// cut (peer haproxy-timeout) its `timeout server` is the scenario's
// hand-set peers.server_timeout, which cuts every slow response.
type haproxyPeer struct{ cut bool }

func (p haproxyPeer) Name() string {
	if p.cut {
		return "haproxy-timeout"
	}
	return "haproxy"
}
func (haproxyPeer) MarksRejects() bool { return false }
func (haproxyPeer) Available() error   { return lookBin("haproxy") }

// HAProxyConfig is the configuration the haproxy peer runs: each server
// limited to the farm's worker slots (maxconn), requests beyond waiting in
// the backend queue for at most HAProxyQueueTimeout (then 503),
// least-connections balancing, keep-alive on both sides. With two or more
// sentry classes, each request gets its class's priority
// (HAProxyClasses): the queue serves the most important class first.
func HAProxyConfig(sc *Scenario, listen string, backends []string, pidFile string) ([]byte, error) {
	per := sc.Farm.Slots
	if sc.Peers.ConnLimit > 0 {
		per = max(1, sc.Peers.ConnLimit/len(backends))
	}
	classes, err := HAProxyClasses(sc)
	if err != nil {
		return nil, err
	}
	// Set from the least important class to the most: a later match
	// overrides an earlier one, so a request that several classes match
	// ends with the first listed, as sentry's first-match classification
	// does. The default class is set first, unconditionally.
	var ordered []HAProxyClass
	for i := len(classes) - 1; i >= 0; i-- {
		if len(classes[i].Rules) > 0 {
			ordered = append(ordered, classes[i])
		}
	}
	var def *HAProxyClass
	for i := range classes {
		if classes[i].Default {
			def = &classes[i]
		}
	}
	qt := HAProxyQueueTimeout(sc)
	why := "peers.queue_timeout"
	if sc.Peers.QueueTimeout == 0 {
		why = fmt.Sprintf("the SLA %v", sc.MinSLA())
		if qt < sc.MinSLA() {
			why += fmt.Sprintf(" minus the mean service time %v", sc.MinSLA()-qt)
		}
	}
	check, err := haproxyCheck(sc)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = haproxyTmpl.Execute(&b, map[string]any{
		"Scenario": sc.Name, "Listen": listen, "Backends": backends, "PerServer": per,
		"QueueTimeout": qt.Milliseconds(), "QueueWhy": why, "PidFile": pidFile,
		"ServerTimeout": serverTimeout(sc).Milliseconds(),
		"Classes":       classes, "Ordered": ordered, "Default": def,
		"Check": check, "Redispatch": hasKill(sc),
		"PerSource": int(math.Ceil(sc.Peers.PerSourceRate)),
	})
	return b.Bytes(), err
}

// serverTimeout is HAProxy's `timeout server`: peers.server_timeout, or 30 s.
func serverTimeout(sc *Scenario) time.Duration {
	if sc.Peers.ServerTimeout > 0 {
		return sc.Peers.ServerTimeout
	}
	return 30 * time.Second
}

var haproxyTmpl = template.Must(template.New("haproxy").Parse(`# Generated by the scenario runner for {{.Scenario}} (peer haproxy).
global
    maxconn 8000
    pidfile {{.PidFile}}
    log stderr format raw local0 err

defaults
    mode http
    log global
    option http-keep-alive
    option dontlognull
    maxconn 8000
    timeout connect 2s
    timeout client 30s
    timeout server {{.ServerTimeout}}ms
    timeout http-keep-alive 30s
    # A request waits for a free server slot at most this long, then gets
    # a 503. A request still queued after that could not be served within
    # the SLA any more, so it is refused rather than served late.
    # Here: {{.QueueWhy}}.
    timeout queue {{.QueueTimeout}}ms
{{- if .Redispatch}}
    # The scenario kills a server: a request whose connection is refused
    # is tried once more, on another server.
    retries 1
    option redispatch
{{- else}}
    retries 0
{{- end}}
{{- with .Check}}
    # Health checks as the sentry policy's health.active; a server in
    # transition is checked at fastinter, as sentry does.
    option httpchk GET {{.Path}}
    timeout check {{.Timeout.Milliseconds}}ms
{{- end}}

frontend fe
    bind {{.Listen}}
{{- if .PerSource}}
    # A per-source rate limit hand-set at the fair share (peers.per_source_rate):
    # each client address's request rate over the last second is tracked,
    # and requests above {{.PerSource}}/s are denied with a 503.
    stick-table type ip size 100k expire 30s store http_req_rate(1s)
    http-request track-sc0 src
    http-request deny deny_status 503 if { sc_http_req_rate(0) gt {{.PerSource}} }
{{- end}}
{{- if .Classes}}
    # Priority classes: sentry's classes in order, the most important
    # first with the lowest value. When every server is at its maxconn, the
    # queue serves the lowest class first and the oldest request within a
    # class. Requests are matched by the rules sentry classifies them with
    # (HAProxy matches the raw path, not sentry's normalised one).
{{- range .Classes}}
{{- range .ACLs}}
    acl {{.}}
{{- end}}
{{- end}}
{{- with .Default}}
    http-request set-priority-class int({{.Priority}})  # {{.Name}}: the default class
{{- end}}
    # From the least important to the most: the last match wins, so a
    # request several classes match gets the first listed, as in sentry.
{{- range .Ordered}}
    http-request set-priority-class int({{.Priority}}) if {{.Cond}}  # {{.Name}}
{{- end}}
{{- end}}
    default_backend farm

backend farm
    balance leastconn
    http-reuse safe
{{- range $i, $b := .Backends}}
    server s{{$i}} {{$b}} maxconn {{$.PerServer}}{{with $.Check}} check inter {{.Inter.Milliseconds}}ms fastinter {{.Fast.Milliseconds}}ms rise {{.Rise}} fall {{.Fall}}{{end}}
{{- end}}
`))

func (p haproxyPeer) Start(ctx context.Context, env PeerEnv) (Running, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(env.Dir, "haproxy.cfg")
	pid := filepath.Join(env.Dir, "haproxy.pid")
	sc := env.Scenario
	if p.cut {
		if sc.Peers.ServerTimeout <= 0 {
			return nil, fmt.Errorf("haproxy-timeout: the scenario sets no peers.server_timeout")
		}
	} else {
		plain := *sc
		plain.Peers.ServerTimeout = 0 // the plain peer keeps the 30 s default
		sc = &plain
	}
	cfg, err := HAProxyConfig(sc, listen, env.Backends, pid)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "haproxy", "-c", "-f", cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c: %v\n%s", err, out)
	}
	// -db: foreground, no daemon; -Ws is not used (no master process).
	proc, err := startProcess(filepath.Join(env.Dir, "peer.log"), "haproxy", "-db", "-f", cfgPath, "-p", pid)
	if err != nil {
		return nil, err
	}
	r := &procRunning{proc: proc, addr: listen, sig: syscall.SIGTERM}
	if err := waitReady(ctx, proc, "http://"+listen+"/healthz", 10*time.Second); err != nil {
		r.Stop()
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	return r, nil
}

// ---- nginx ----

type nginxPeer struct{}

func (nginxPeer) Name() string       { return "nginx" }
func (nginxPeer) MarksRejects() bool { return false }
func (nginxPeer) Available() error   { return lookBin("nginx") }

// NginxConfig is the configuration the nginx peer runs: concurrent
// requests limited by limit_conn to the farm's capacity in slots (servers
// × slots), refused beyond with 503, least-connections balancing and
// upstream keep-alive.
func NginxConfig(sc *Scenario, listen string, backends []string, dir string) []byte {
	limit := sc.Farm.Servers * sc.Farm.Slots
	if sc.Peers.ConnLimit > 0 {
		limit = sc.Peers.ConnLimit
	}
	var b bytes.Buffer
	nginxTmpl.Execute(&b, map[string]any{
		"Scenario": sc.Name, "Listen": listen, "Backends": backends, "Limit": limit,
		"Dir": dir, "KeepAlive": max(2*limit, 32),
		"PerSource": int(math.Ceil(sc.Peers.PerSourceRate)), "Burst": max(1, int(math.Ceil(sc.Peers.PerSourceRate/10))),
	})
	return b.Bytes()
}

var nginxTmpl = template.Must(template.New("nginx").Parse(`# Generated by the scenario runner for {{.Scenario}} (peer nginx).
daemon off;
master_process on;
worker_processes auto;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
worker_rlimit_nofile 16384;

events {
    worker_connections 8000;
}

http {
    access_log off;
    client_body_temp_path {{.Dir}}/tmp/body;
    proxy_temp_path {{.Dir}}/tmp/proxy;
    fastcgi_temp_path {{.Dir}}/tmp/fastcgi;
    uwsgi_temp_path {{.Dir}}/tmp/uwsgi;
    scgi_temp_path {{.Dir}}/tmp/scgi;
    keepalive_timeout 30s;
    keepalive_requests 100000;

    upstream farm {
        least_conn;
{{- range .Backends}}
        server {{.}};
{{- end}}
        keepalive {{.KeepAlive}};
        keepalive_requests 100000;
    }

    # Requests in progress, per virtual server, limited to the farm's
    # worker slots (servers × slots); beyond that, 503 at once.
    limit_conn_zone $server_name zone=perserver:1m;
    limit_conn_status 503;
    limit_conn_log_level info;
{{- if .PerSource}}

    # A per-source rate limit hand-set at the fair share
    # (peers.per_source_rate): {{.PerSource}} r/s per client address, a burst
    # of a tenth of a second served at once, 503 beyond.
    limit_req_zone $binary_remote_addr zone=persource:10m rate={{.PerSource}}r/s;
    limit_req_status 503;
    limit_req_log_level info;
{{- end}}

    server {
        listen {{.Listen}};
        server_name farm;   # the limit_conn key: an empty key is not counted
        location / {
            limit_conn perserver {{.Limit}};
{{- if .PerSource}}
            limit_req zone=persource burst={{.Burst}} nodelay;
{{- end}}
            proxy_pass http://farm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 2s;
            proxy_read_timeout 30s;
            proxy_next_upstream off;
        }
    }
}
`))

func (p nginxPeer) Start(ctx context.Context, env PeerEnv) (Running, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(env.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cfgPath, NginxConfig(env.Scenario, listen, env.Backends, dir), 0o644); err != nil {
		return nil, err
	}
	args := []string{"-p", dir, "-c", cfgPath, "-e", filepath.Join(dir, "error.log")}
	if out, err := exec.CommandContext(ctx, "nginx", append([]string{"-t", "-q"}, args...)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v\n%s", err, out)
	}
	proc, err := startProcess(filepath.Join(dir, "peer.log"), "nginx", args...)
	if err != nil {
		return nil, err
	}
	r := &procRunning{proc: proc, addr: listen, sig: syscall.SIGTERM}
	if err := waitReady(ctx, proc, "http://"+listen+"/healthz", 10*time.Second); err != nil {
		r.Stop()
		return nil, fmt.Errorf("nginx: %w", err)
	}
	return r, nil
}

type procRunning struct {
	proc *process
	addr string
	sig  syscall.Signal
}

func (r *procRunning) Addr() string                { return r.addr }
func (r *procRunning) Collect(ctx context.Context) {}
func (r *procRunning) Stop()                       { r.proc.stop(r.sig, 5*time.Second) }

func lookBin(name string) error {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%s is %w (apt-get install -y %s, or run e2e/run-scenarios.sh, which installs it)", name, errNotInstalled, name)
	}
	return nil
}

// logLevel is sentry's log level in a scenario run: warn, or
// SENTRY_SCENARIO_LOG (for example info, to see auto's mode switches and
// their reasons in the peer's log).
func logLevel() string {
	if l := os.Getenv("SENTRY_SCENARIO_LOG"); l != "" {
		return l
	}
	return "warn"
}
