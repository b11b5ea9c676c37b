package policy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sentry-proxy/sentry/classify"
	"gopkg.in/yaml.v3"
)

// defaultApp holds every per-app default (see the field docs in snapshot.go).
func defaultApp() *App {
	return &App{
		Balance:  LeastLoaded,
		Backends: Backends{Protocol: ProtoHTTP1},
		Health: Health{
			Passive: PassiveHealth{Failures: 3, Cooldown: 10 * time.Second},
		},
		Timeouts:           Timeouts{Connect: 2 * time.Second, Response: 30 * time.Second},
		MaxConnsPerBackend: 1024,
		RequestIDHeader:    "X-Request-Id",
		Reject: Reject{
			Status:     503,
			Body:       "sentry: overloaded, retry later\n",
			RetryAfter: time.Second,
			GRPCStatus: GRPCUnavailable,
		},
		Classes:      defaultClasses(),
		ServerTiming: ServerTiming{Strip: true},
		SLA:          defaultSLA(),
		Estimator:    defaultEstimator(),
		Admission:    defaultAdmission(),
		Termination:  defaultTermination(),
		Provisioning: defaultProvisioning(),
		Degradation:  Degradation{Header: DefaultLoadHeader},
	}
}

func defaultActiveHealth() *ActiveHealth {
	return &ActiveHealth{Path: "/", Interval: 5 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
}

const defaultDNSInterval = 5 * time.Second

// app decodes one entry of apps. It reports false when the entry is not a
// mapping at all (nothing to add to the snapshot).
//
// Adding a section: add its struct to App in snapshot.go and its defaults
// to defaultApp, write one
// `func (d *decoder) section(n *yaml.Node, path string, x *Section)` that
// decodes and range-checks it (see reject below for the pattern), and add
// one row to the table here. Rules that tie two sections together go at the
// end of this function.
func (d *decoder) app(n *yaml.Node, path string, a *App, m *appMeta) bool {
	var sawName, sawBackends bool
	// Where classes and estimator were written, and whether they decoded
	// cleanly, for the checks at the end.
	var classesNode, estimatorNode *yaml.Node
	var classLines []int
	var classesBad, estimatorBad bool
	var revenueGiven bool // provisioning.revenue written (else sla.revenue)
	var degradationNode *yaml.Node
	ok := d.mapping(n, path, []field{
		{"name", func(v *yaml.Node, p string) {
			sawName = true
			m.nameLine = line(v)
			if s, ok := d.str(v, p); ok {
				if err := checkName(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				a.Name = s
			}
		}},
		{"listen", func(v *yaml.Node, p string) {
			m.listenGiven = true
			a.Listen, m.listenLines = d.listen(v, p)
		}},
		{"hosts", func(v *yaml.Node, p string) {
			a.Hosts, m.hostLines, m.hostsBad = d.hosts(v, p)
		}},
		{"tls", func(v *yaml.Node, p string) {
			m.tlsLine = line(v)
			a.TLS = d.tls(v, p)
			m.tlsBad = a.TLS == nil
		}},
		{"h2c", func(v *yaml.Node, p string) {
			m.h2cLine = line(v)
			d.boolField(&a.H2C)(v, p)
		}},
		{"trusted_proxies", func(v *yaml.Node, p string) { a.TrustedProxies = d.trustedProxies(v, p) }},
		{"backends", func(v *yaml.Node, p string) { sawBackends = true; d.backends(v, p, &a.Backends) }},
		{"balance", func(v *yaml.Node, p string) {
			if s, ok := d.enum(v, p, string(LeastLoaded), string(RoundRobin), string(P2C)); ok {
				a.Balance = Balance(s)
			}
		}},
		{"health", func(v *yaml.Node, p string) { d.health(v, p, &a.Health) }},
		{"timeouts", func(v *yaml.Node, p string) { d.timeouts(v, p, &a.Timeouts) }},
		{"max_body_bytes", d.sizeField(&a.MaxBodyBytes, 0, math.MaxInt64)},
		{"request_buffering", func(v *yaml.Node, p string) {
			if s, ok := d.enum(v, p, "on", "off"); ok {
				a.RequestBufferingOff = s == "off"
			}
		}},
		{"response_buffering", func(v *yaml.Node, p string) {
			if s, ok := d.enum(v, p, "on", "off"); ok {
				a.ResponseBufferingOff = s == "off"
			}
		}},
		{"max_conns_per_backend", d.intField(&a.MaxConnsPerBackend, 1, 1<<20)},
		{"request_id_header", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				h, err := parseHeaderName(s)
				if err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				a.RequestIDHeader = h
			}
		}},
		{"reject", func(v *yaml.Node, p string) { d.reject(v, p, &a.Reject) }},
		{"classes", func(v *yaml.Node, p string) {
			classesNode = v
			var cs []classify.ClassConfig
			var terms []*Terminate
			if cs, classLines, terms, classesBad = d.classes(v, p); !classesBad {
				a.Classes, a.Terminate = cs, terms
			}
		}},
		{"server_timing", func(v *yaml.Node, p string) { d.serverTiming(v, p, &a.ServerTiming) }},
		{"sla", func(v *yaml.Node, p string) { d.sla(v, p, &a.SLA) }},
		{"estimator", func(v *yaml.Node, p string) {
			estimatorNode = v
			mark := d.reports
			d.estimator(v, p, &a.Estimator)
			estimatorBad = d.reported(mark)
		}},
		{"admission", func(v *yaml.Node, p string) { d.admission(v, p, &a.Admission) }},
		{"termination", func(v *yaml.Node, p string) { d.termination(v, p, &a.Termination) }},
		// provisioning.go
		{"provisioning", func(v *yaml.Node, p string) { revenueGiven = d.provisioning(v, p, &a.Provisioning) }},
		{"partition", func(v *yaml.Node, p string) { d.partition(v, p, &a.Partition) }},
		// degradation.go
		{"degradation", func(v *yaml.Node, p string) {
			degradationNode = v
			d.degradation(v, p, &a.Degradation)
		}},
	})
	if !ok {
		return false
	}
	if !revenueGiven {
		a.Provisioning.Revenue = a.SLA.Revenue
	}
	if !sawName {
		d.errorf(n, path, "name is required")
	}
	if a.H2C && m.tlsLine > 0 {
		// A TLS listener offers h2 by ALPN already; h2c is the cleartext
		// form (docs/policy.md, apps[]).
		d.add(m.h2cLine, "%s.h2c: h2c is HTTP/2 on a plain listener, but tls is given (line %d); a TLS listener offers h2 by ALPN", path, m.tlsLine)
	}
	if !sawBackends {
		d.errorf(n, path, "backends is required (static: [host:port, ...] or dns: {name, port})")
	}
	if degradationNode != nil {
		d.checkDegradation(a, degradationNode, joinPath(path, "degradation"))
	}
	// Rules that tie two sections of one app together go here. The classes
	// and the estimator settings are also handed to the libraries that will
	// run them, as a backstop to the checks above: a bad rule or setting
	// must fail the policy, not the reload that applies it.
	if classesNode != nil && !classesBad {
		d.compileClasses(a.Classes, classLines, classesNode, joinPath(path, "classes"))
	}
	if classesNode != nil && !classesBad {
		d.checkPeriods(a, classLines, joinPath(path, "classes"))
	}
	if !estimatorBad && !classesBad {
		at, p := estimatorNode, joinPath(path, "estimator")
		if at == nil {
			at, p = n, path
		}
		d.checkEstimator(a, classNames(a.Classes), at, p)
	}
	return true
}

// listen decodes an app's listen addresses: one string or a list.
func (d *decoder) listen(n *yaml.Node, path string) ([]string, []int) {
	if r := resolve(n); isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
		d.errorf(n, path, "empty; give host:port, or leave listen out for %s", DefaultListen)
		return nil, nil
	}
	items, _ := d.strList(n, path, true)
	var addrs []string
	var lines []int
	seen := map[string]int{}
	for _, it := range items {
		addr, err := parseListenAddr(it.s)
		if err != nil {
			d.errorf(it.node, it.path, "%v", err)
			continue
		}
		if first, dup := seen[addr]; dup {
			d.errorf(it.node, it.path, "%s is listed twice (first at line %d)", addr, first)
			continue
		}
		seen[addr] = line(it.node)
		addrs = append(addrs, addr)
		lines = append(lines, line(it.node))
	}
	return addrs, lines
}

// hosts decodes an app's host names; bad reports whether any entry failed.
func (d *decoder) hosts(n *yaml.Node, path string) (hosts []string, lines []int, bad bool) {
	items, ok := d.strList(n, path, false)
	bad = !ok
	seen := map[string]int{}
	for _, it := range items {
		h, err := parseHost(it.s)
		if err != nil {
			d.errorf(it.node, it.path, "%v", err)
			bad = true
			continue
		}
		if first, dup := seen[h]; dup {
			d.errorf(it.node, it.path, "host %q is listed twice (first at line %d)", h, first)
			continue
		}
		seen[h] = line(it.node)
		hosts = append(hosts, h)
		lines = append(lines, line(it.node))
	}
	return hosts, lines, bad
}

// tls decodes the certificate and key file names and loads them as a pair,
// so a bad certificate fails the policy rather than the first handshake.
// Relative names are taken from the policy file's directory. It returns nil
// after reporting any problem.
func (d *decoder) tls(n *yaml.Node, path string) *TLS {
	var t TLS
	var certNode, keyNode, ocspNode *yaml.Node
	if !d.mapping(n, path, []field{
		{"cert", func(v *yaml.Node, p string) { certNode = v; t.CertFile = d.file(v, p) }},
		{"key", func(v *yaml.Node, p string) { keyNode = v; t.KeyFile = d.file(v, p) }},
		{"ocsp", func(v *yaml.Node, p string) { ocspNode = v; t.OCSPFile = d.file(v, p) }},
	}) {
		return nil
	}
	if certNode == nil {
		d.errorf(n, path, "cert is required (a PEM certificate file)")
	}
	if keyNode == nil {
		d.errorf(n, path, "key is required (a PEM private key file)")
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return nil
	}
	// A stale response is no error here: the daemon warns when it loads
	// the listener (a stale file must not stop a restart).
	if _, _, err := LoadCertificate(&t, time.Now()); err != nil {
		if oe := (*OCSPError)(nil); errors.As(err, &oe) {
			d.errorf(ocspNode, path+".ocsp", "%v", oe.Err)
		} else {
			d.errorf(n, path, "cannot load the certificate and key as a pair: %v", err)
		}
		return nil
	}
	return &t
}

// backendTLS decodes backends.tls. It loads what it names (the CA bundle,
// the client pair) so that a bad file is refused at load, at its line.
func (d *decoder) backendTLS(n *yaml.Node, path string) *BackendTLS {
	var t BackendTLS
	var certNode, keyNode, caNode, skipNode *yaml.Node
	if !d.mapping(n, path, []field{
		{"server_name", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				if err := checkServerName(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				t.ServerName = s
			}
		}},
		{"ca", func(v *yaml.Node, p string) {
			caNode = v
			if f := d.file(v, p); f != "" {
				b, err := os.ReadFile(f)
				if err == nil && !x509.NewCertPool().AppendCertsFromPEM(b) {
					err = errors.New("no PEM certificate in it")
				}
				if err != nil {
					d.errorf(v, p, "%s: %v", f, err)
					return
				}
				t.CAFile = f
			}
		}},
		{"insecure_skip_verify", func(v *yaml.Node, p string) {
			skipNode = v
			d.boolField(&t.InsecureSkipVerify)(v, p)
		}},
		{"cert", func(v *yaml.Node, p string) { certNode = v; t.CertFile = d.file(v, p) }},
		{"key", func(v *yaml.Node, p string) { keyNode = v; t.KeyFile = d.file(v, p) }},
	}) {
		return nil
	}
	// server_name still counts without verification: it is the SNI, which
	// a backend behind a TLS router (or serving several names) needs.
	if t.InsecureSkipVerify && caNode != nil {
		d.errorf(caNode, path+".ca", "ca is not used with insecure_skip_verify: true (line %d), which verifies nothing", line(skipNode))
	}
	switch {
	case certNode != nil && keyNode == nil:
		d.errorf(certNode, path+".cert", "a client certificate needs its key too")
	case keyNode != nil && certNode == nil:
		d.errorf(keyNode, path+".key", "a client key needs its cert too")
	case t.CertFile != "" && t.KeyFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			d.errorf(certNode, path+".cert", "cannot load the client certificate and key as a pair: %v", err)
		}
	}
	return &t
}

// checkServerName checks backends.tls.server_name: a DNS name or an IP.
func checkServerName(s string) error {
	if s == "" {
		return errors.New("empty server_name; leave it out to use the backend's address")
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	return checkDNSName(s)
}

// file decodes a file name, resolves it against the policy's directory and
// checks that it exists. It returns "" after reporting a problem.
func (d *decoder) file(n *yaml.Node, path string) string {
	s, ok := d.str(n, path)
	if !ok {
		return ""
	}
	if s == "" {
		d.errorf(n, path, "empty file name")
		return ""
	}
	if !filepath.IsAbs(s) && d.baseDir != "" {
		s = filepath.Join(d.baseDir, s)
	}
	fi, err := os.Stat(s)
	switch {
	case err != nil:
		d.errorf(n, path, "%v", err)
		return ""
	case !fi.Mode().IsRegular():
		d.errorf(n, path, "%s is not a regular file", s)
		return ""
	case fi.Size() > maxPEMFile:
		d.errorf(n, path, "%s is %d bytes; a PEM file over %d bytes is not a certificate or key", s, fi.Size(), maxPEMFile)
		return ""
	}
	return s
}

// maxPEMFile bounds what is read as a certificate or key file.
const maxPEMFile = 1 << 20

func (d *decoder) trustedProxies(n *yaml.Node, path string) []netip.Prefix {
	items, _ := d.strList(n, path, false)
	var out []netip.Prefix
	seen := map[netip.Prefix]int{}
	for _, it := range items {
		p, err := parsePrefix(it.s)
		if err != nil {
			d.errorf(it.node, it.path, "%v", err)
			continue
		}
		if first, dup := seen[p]; dup {
			d.errorf(it.node, it.path, "%s is listed twice (first at line %d)", p, first)
			continue
		}
		seen[p] = line(it.node)
		out = append(out, p)
	}
	return out
}

// backends decodes exactly one of static and dns.
func (d *decoder) backends(n *yaml.Node, path string, b *Backends) {
	var sawStatic, sawDNS bool
	var tlsNode, protoNode *yaml.Node
	if !d.mapping(n, path, []field{
		{"static", func(v *yaml.Node, p string) { sawStatic = true; b.Static = d.static(v, p) }},
		{"dns", func(v *yaml.Node, p string) { sawDNS = true; b.DNS = d.dns(v, p) }},
		{"tls", func(v *yaml.Node, p string) { tlsNode = v; b.TLS = d.backendTLS(v, p) }},
		{"protocol", func(v *yaml.Node, p string) {
			protoNode = v
			if s, ok := d.enum(v, p, ProtoHTTP1, ProtoH2C, ProtoH2); ok {
				b.Protocol = s
			}
		}},
	}) {
		return
	}
	switch {
	case b.Protocol == ProtoH2 && tlsNode == nil:
		d.errorf(protoNode, path+".protocol", "h2 is HTTP/2 over TLS: give backends.tls too (h2c is HTTP/2 without TLS)")
	case b.Protocol == ProtoH2C && tlsNode != nil:
		d.errorf(protoNode, path+".protocol", "h2c is HTTP/2 without TLS, but backends.tls is given (line %d); use h2 for HTTP/2 over TLS", line(tlsNode))
	}
	switch {
	case sawStatic && sawDNS:
		d.errorf(n, path, "give static or dns, not both")
		b.DNS = nil
	case !sawStatic && !sawDNS:
		d.errorf(n, path, "give static: [host:port, ...] or dns: {name, port}")
	}
}

func (d *decoder) static(n *yaml.Node, path string) []string {
	r := resolve(n)
	if isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
		d.errorf(n, path, "at least one backend address is required")
		return nil
	}
	items, _ := d.strList(n, path, false)
	var out []string
	seen := map[string]int{}
	for _, it := range items {
		addr, err := parseBackendAddr(it.s)
		if err != nil {
			d.errorf(it.node, it.path, "%v", err)
			continue
		}
		if first, dup := seen[addr]; dup {
			d.errorf(it.node, it.path, "backend %s is listed twice (first at line %d)", addr, first)
			continue
		}
		seen[addr] = line(it.node)
		out = append(out, addr)
	}
	return out
}

func (d *decoder) dns(n *yaml.Node, path string) *DNS {
	x := &DNS{Interval: defaultDNSInterval}
	var sawName, sawPort bool
	if !d.mapping(n, path, []field{
		{"name", func(v *yaml.Node, p string) {
			sawName = true
			if s, ok := d.str(v, p); ok {
				if err := checkDNSName(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				x.Name = s
			}
		}},
		{"port", func(v *yaml.Node, p string) {
			sawPort = true
			if port, ok := d.integer(v, p, 1, 65535); ok {
				x.Port = uint16(port)
			}
		}},
		{"interval", d.durationField(&x.Interval, time.Nanosecond)},
		{"server", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				a, err := parseDNSServer(s)
				if err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				x.Server = a
			}
		}},
	}) {
		return nil
	}
	if !sawName {
		d.errorf(n, path, "name is required (the DNS name to resolve)")
	}
	if !sawPort {
		d.errorf(n, path, "port is required")
	}
	return x
}

func (d *decoder) health(n *yaml.Node, path string, h *Health) {
	d.mapping(n, path, []field{
		{"active", func(v *yaml.Node, p string) { h.Active = d.activeHealth(v, p) }},
		{"passive", func(v *yaml.Node, p string) { d.passiveHealth(v, p, &h.Passive) }},
	})
}

// activeHealth decodes active checks. Writing the section turns them on;
// an empty section ({}) means on with every default.
func (d *decoder) activeHealth(n *yaml.Node, path string) *ActiveHealth {
	a := defaultActiveHealth()
	var timeoutNode *yaml.Node
	if !d.mapping(n, path, []field{
		{"path", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				if err := checkProbePath(s); err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				a.Path = s
			}
		}},
		{"interval", d.durationField(&a.Interval, time.Nanosecond)},
		{"timeout", func(v *yaml.Node, p string) {
			timeoutNode = v
			d.durationField(&a.Timeout, time.Nanosecond)(v, p)
		}},
		{"rise", d.intField(&a.Rise, 1, 1000)},
		{"fall", d.intField(&a.Fall, 1, 1000)},
	}) {
		return nil
	}
	if a.Timeout > a.Interval {
		at := timeoutNode
		if at == nil {
			at = n
		}
		d.errorf(at, path, "timeout %v is longer than interval %v; a probe must finish before the next starts", a.Timeout, a.Interval)
	}
	return a
}

func (d *decoder) passiveHealth(n *yaml.Node, path string, h *PassiveHealth) {
	d.mapping(n, path, []field{
		{"failures", d.intField(&h.Failures, 0, 1000)},
		{"cooldown", d.durationField(&h.Cooldown, time.Nanosecond)},
	})
}

func (d *decoder) timeouts(n *yaml.Node, path string, t *Timeouts) {
	d.mapping(n, path, []field{
		{"connect", d.durationField(&t.Connect, time.Nanosecond)},
		{"response", d.durationField(&t.Response, time.Nanosecond)},
	})
}

// maxRejectBody bounds the prebuilt rejection body.
const maxRejectBody = 64 << 10

func (d *decoder) reject(n *yaml.Node, path string, r *Reject) {
	d.mapping(n, path, []field{
		{"status", func(v *yaml.Node, p string) {
			st, ok := d.integer(v, p, 0, 999)
			if !ok {
				return
			}
			if st != 503 && st != 429 {
				d.errorf(v, p, "status %d is not allowed; use 503 or 429", st)
				return
			}
			r.Status = int(st)
		}},
		{"body", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				if len(s) > maxRejectBody {
					d.errorf(v, p, "body is %d bytes; the limit is %d", len(s), maxRejectBody)
					return
				}
				r.Body = s
			}
		}},
		{"retry_after", func(v *yaml.Node, p string) {
			ra, ok := d.duration(v, p, time.Second)
			if !ok {
				return
			}
			if ra%time.Second != 0 {
				d.errorf(v, p, "%v is not whole seconds; Retry-After counts seconds", ra)
				return
			}
			r.RetryAfter = ra
		}},
		{"grpc_status", func(v *yaml.Node, p string) {
			if s, ok := d.enum(v, p, "unavailable", "resource_exhausted"); ok {
				r.GRPCStatus = GRPCUnavailable
				if s == "resource_exhausted" {
					r.GRPCStatus = GRPCResourceExhausted
				}
			}
		}},
	})
}

// checkPeriods refuses a class whose policer period leaves no time within
// an SLA target: the batch test admits only when Q + (η + ⌈β/n⌉)·S ≤
// R_sla − d_i, so d_i ≥ R_sla rejects the class even on an idle farm.
func (d *decoder) checkPeriods(a *App, lines []int, path string) {
	if len(a.SLA.Targets) == 0 {
		return
	}
	minT, minIdx := a.SLA.Targets[0].Target, 0
	for i, b := range a.SLA.Targets {
		if b.Target < minT {
			minT, minIdx = b.Target, i
		}
	}
	for i, c := range a.Classes {
		if c.Period > 0 && c.Period >= minT && i < len(lines) {
			d.add(lines[i], "%s[%d].period: %v leaves no time within the SLA target %v (sla.targets[%d]): the batch test admits only while Q + (η + ⌈β/n⌉)·S ≤ R_sla − period; use a period well below every target",
				path, i, c.Period, minT, minIdx)
		}
	}
}
