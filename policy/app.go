package policy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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

// appState is what an app's fields note while they are read, for the
// checks that tie the app's sections together.
type appState struct {
	m *appMeta
	// Where classes and estimator were written, and whether they decoded
	// cleanly.
	classesNode, estimatorNode, degradationNode *yaml.Node
	classLines                                  []pos
	classesBad, estimatorBad                    bool
	revenueGiven                                bool // provisioning.revenue written (else sla.revenue)
}

// newAppState returns a state writing to m (a scratch meta when nil: the
// dump and the schema only read the table).
func newAppState(m *appMeta) *appState {
	if m == nil {
		m = &appMeta{}
	}
	return &appState{m: m}
}

// app decodes one entry of apps. It reports false when the entry is not a
// mapping at all (nothing to add to the snapshot).
//
// Adding a section: add its struct to App in snapshot.go and its defaults
// to defaultApp, write its key table
// `func (d *decoder) sectionFields(x *Section) []field` (see rejectFields
// for the pattern: each row says how its key is read, written back and
// described) and, if keys of the section are checked together, a
// `func (d *decoder) section(n *yaml.Node, path string, x *Section)` that
// runs d.mapping on the table and then those checks; then add one row to
// appFields. Rules that tie two sections together go at the end of this
// function.
func (d *decoder) app(n *yaml.Node, path string, a *App, m *appMeta) bool {
	st := newAppState(m)
	if !d.mapping(n, path, d.appFields(a, st)) {
		return false
	}
	if !st.revenueGiven {
		a.Provisioning.Revenue = a.SLA.Revenue
	}
	if a.H2C && m.tls.line > 0 {
		// A TLS listener offers h2 by ALPN already; h2c is the cleartext
		// form (docs/policy.md, apps[]).
		d.add(m.h2c, "%s.h2c: h2c is HTTP/2 on a plain listener, but tls is given (line %d); a TLS listener offers h2 by ALPN", path, m.tls.line)
	}
	if st.degradationNode != nil {
		d.checkDegradation(a, st.degradationNode, joinPath(path, "degradation"))
	}
	// Rules that tie two sections of one app together go here. The classes
	// and the estimator settings are also handed to the libraries that will
	// run them, as a backstop to the checks above: a bad rule or setting
	// must fail the policy, not the reload that applies it.
	if st.classesNode != nil && !st.classesBad {
		d.compileClasses(a.Classes, st.classLines, st.classesNode, joinPath(path, "classes"))
	}
	if st.classesNode != nil && !st.classesBad {
		d.checkPeriods(a, st.classLines, joinPath(path, "classes"))
	}
	if !st.estimatorBad && !st.classesBad {
		at, p := st.estimatorNode, joinPath(path, "estimator")
		if at == nil {
			at, p = n, path
		}
		d.checkEstimator(a, classNames(a.Classes), at, p)
	}
	return true
}

// appFields is an app's key table.
func (d *decoder) appFields(a *App, st *appState) []field {
	m := st.m
	return []field{
		{"name", func() val {
			v := d.textField(&a.Name, false, func(s string) (string, error) { return s, checkName(s) })
			set := v.set
			v.set = func(n *yaml.Node, p string) { m.name = posOf(n); set(n, p) }
			v.kind = &kind{t: kString, pattern: "^[a-z0-9_-]{1,63}$"}
			return v.need("")
		}()},
		{"listen", val{
			set: func(v *yaml.Node, p string) {
				m.listenGiven = true
				a.Listen, m.listens = d.listen(v, p)
			},
			get: func() *yaml.Node {
				if len(a.Listen) == 0 {
					return nil // not yet defaulted (the schema's app)
				}
				return strSeq(a.Listen)
			},
			kind: &kind{t: kUnion, alts: []*kind{kindString, listOf(kindString, 1, unbounded)}},
		}},
		{"hosts", val{
			set: func(v *yaml.Node, p string) {
				a.Hosts, m.hosts, m.hostsBad = d.hosts(v, p)
			},
			get: func() *yaml.Node {
				if len(a.Hosts) == 0 {
					return nil
				}
				return strSeq(a.Hosts)
			},
			kind: listOf(kindString, 0, unbounded).orNull(),
		}},
		{"tls", d.optional(func() bool { return a.TLS != nil },
			func() []field { return d.tlsFields(orNew(a.TLS, newTLS), new(tlsState)) },
			func(v *yaml.Node, p string) {
				m.tls = posOf(v)
				a.TLS = d.tls(v, p)
				m.tlsBad = a.TLS == nil
			})},
		{"h2c", func() val {
			v := d.boolField(&a.H2C)
			set := v.set
			v.set = func(n *yaml.Node, p string) { m.h2c = posOf(n); set(n, p) }
			return v
		}()},
		{"trusted_proxies", val{
			set:  func(v *yaml.Node, p string) { a.TrustedProxies = d.trustedProxies(v, p) },
			get:  func() *yaml.Node { return prefixSeq(a.TrustedProxies) },
			kind: listOf(kindString, 0, unbounded).orNull(),
		}},
		{"backends", d.section(func() []field { return d.backendsFields(&a.Backends, new(backendsState)) },
			func(v *yaml.Node, p string) { d.backends(v, p, &a.Backends) }).need("static: [host:port, ...] or dns: {name, port}")},
		{"balance", val{
			set: func(v *yaml.Node, p string) {
				if s, ok := d.enum(v, p, string(LeastLoaded), string(RoundRobin), string(P2C)); ok {
					a.Balance = Balance(s)
				}
			},
			get:  func() *yaml.Node { return strNode(string(a.Balance)) },
			kind: &kind{t: kEnum, enum: []string{string(LeastLoaded), string(RoundRobin), string(P2C)}},
		}},
		{"health", d.section(func() []field { return d.healthFields(&a.Health) }, nil)},
		{"timeouts", d.section(func() []field { return d.timeoutsFields(&a.Timeouts) }, nil)},
		{"max_body_bytes", d.sizeField(&a.MaxBodyBytes, 0, math.MaxInt64)},
		{"request_buffering", val{
			set: func(v *yaml.Node, p string) {
				if s, ok := d.enum(v, p, "on", "off"); ok {
					a.RequestBufferingOff = s == "off"
				}
			},
			get: func() *yaml.Node {
				if a.RequestBufferingOff {
					return strNode("off")
				}
				return strNode("on")
			},
			kind: &kind{t: kEnum, enum: []string{"on", "off"}},
		}},
		{"response_buffering", val{
			set: func(v *yaml.Node, p string) {
				if s, ok := d.enum(v, p, "on", "off"); ok {
					a.ResponseBufferingOff = s == "off"
				}
			},
			get: func() *yaml.Node {
				if a.ResponseBufferingOff {
					return strNode("off")
				}
				return strNode("on")
			},
			kind: &kind{t: kEnum, enum: []string{"on", "off"}},
		}},
		{"max_conns_per_backend", d.intField(&a.MaxConnsPerBackend, 1, 1<<20)},
		{"request_id_header", d.textField(&a.RequestIDHeader, false, parseHeaderName)},
		{"reject", d.section(func() []field { return d.rejectFields(&a.Reject) }, nil)},
		{"classes", val{
			set: func(v *yaml.Node, p string) {
				st.classesNode = v
				var cs []classify.ClassConfig
				var terms []*Terminate
				if cs, st.classLines, terms, st.classesBad = d.classes(v, p); !st.classesBad {
					a.Classes, a.Terminate = cs, terms
				}
			},
			get: func() *yaml.Node {
				return emitList(len(a.Classes), false, func(i int) []field {
					return d.classFields(&a.Classes[i], &classPos{terminate: a.ClassTerminate(i)})
				})
			},
			kind: listOf(mapKind(func() []field { return d.classFields(&classify.ClassConfig{}, &classPos{}) }), 1, maxClasses),
		}},
		{"server_timing", d.section(func() []field { return d.serverTimingFields(&a.ServerTiming) }, nil)},
		{"sla", d.section(func() []field { return d.slaFields(&a.SLA) }, nil)},
		{"estimator", d.section(func() []field { return d.estimatorFields(&a.Estimator) },
			func(v *yaml.Node, p string) {
				st.estimatorNode = v
				mark := d.reports
				d.mapping(v, p, d.estimatorFields(&a.Estimator))
				st.estimatorBad = d.reported(mark)
			})},
		{"admission", d.section(func() []field { return d.admissionFields(&a.Admission) }, nil)},
		{"termination", d.section(func() []field { return d.terminationFields(&a.Termination, new(terminationState)) },
			func(v *yaml.Node, p string) { d.termination(v, p, &a.Termination) })},
		// provisioning.go
		{"provisioning", d.section(func() []field { return d.provisioningFields(&a.Provisioning, new(provisioningState)) },
			func(v *yaml.Node, p string) { st.revenueGiven = d.provisioning(v, p, &a.Provisioning) })},
		{"partition", d.optional(func() bool { return a.Partition.Count > 0 },
			func() []field { return d.partitionFields(&a.Partition, new(partitionState)) },
			func(v *yaml.Node, p string) { d.partition(v, p, &a.Partition) })},
		// degradation.go
		{"degradation", d.section(func() []field { return d.degradationFields(&a.Degradation) },
			func(v *yaml.Node, p string) {
				st.degradationNode = v
				d.mapping(v, p, d.degradationFields(&a.Degradation))
			})},
	}
}

func prefixSeq(ps []netip.Prefix) *yaml.Node {
	if len(ps) == 0 {
		return nil
	}
	n := seqNode()
	n.Style = yaml.FlowStyle
	for _, p := range ps {
		n.Content = append(n.Content, strNode(p.String()))
	}
	return n
}

// listen decodes an app's listen addresses: one string or a list.
func (d *decoder) listen(n *yaml.Node, path string) ([]string, []pos) {
	if r := resolve(n); isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
		d.errorf(n, path, "empty; give host:port, or leave listen out for %s", DefaultListen)
		return nil, nil
	}
	items, _ := d.strList(n, path, true)
	var addrs []string
	var at []pos
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
		at = append(at, posOf(it.node))
	}
	return addrs, at
}

// hosts decodes an app's host names; bad reports whether any entry failed.
func (d *decoder) hosts(n *yaml.Node, path string) (hosts []string, at []pos, bad bool) {
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
		at = append(at, posOf(it.node))
	}
	return hosts, at, bad
}

// tlsState is where tls's files were written.
type tlsState struct{ ocsp *yaml.Node }

func newTLS() *TLS { return &TLS{} }

// tls decodes the certificate and key file names and loads them as a pair,
// so a bad certificate fails the policy rather than the first handshake.
// Relative names are taken from the policy file's directory. It returns nil
// after reporting any problem.
func (d *decoder) tls(n *yaml.Node, path string) *TLS {
	t := newTLS()
	var st tlsState
	if !d.mapping(n, path, d.tlsFields(t, &st)) {
		return nil
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return nil
	}
	// A stale response is no error here: the daemon warns when it loads
	// the listener (a stale file must not stop a restart).
	if _, _, err := LoadCertificate(t, time.Now()); err != nil {
		if oe := (*OCSPError)(nil); errors.As(err, &oe) {
			d.errorf(st.ocsp, path+".ocsp", "%v", oe.Err)
		} else {
			d.errorf(n, path, "cannot load the certificate and key as a pair: %v", err)
		}
		return nil
	}
	return t
}

func (d *decoder) tlsFields(t *TLS, st *tlsState) []field {
	return []field{
		{"cert", d.fileField(&t.CertFile, nil).need("a PEM certificate file")},
		{"key", d.fileField(&t.KeyFile, nil).need("a PEM private key file")},
		{"ocsp", d.fileField(&t.OCSPFile, &st.ocsp)},
	}
}

// fileField is a file name key (d.file); at, if not nil, notes where it
// was written. The dump writes the name absolute.
func (d *decoder) fileField(dst *string, at **yaml.Node) val {
	return val{
		set: func(v *yaml.Node, p string) {
			if at != nil {
				*at = v
			}
			*dst = d.file(v, p)
		},
		get:  func() *yaml.Node { return absPath(*dst) },
		kind: kindString,
	}
}

// backendTLSState is where backends.tls's keys were written, for the
// checks across them.
type backendTLSState struct{ cert, key, ca, skip *yaml.Node }

func newBackendTLS() *BackendTLS { return &BackendTLS{} }

// backendTLS decodes backends.tls. It loads what it names (the CA bundle,
// the client pair) so that a bad file is refused at load, at its line.
func (d *decoder) backendTLS(n *yaml.Node, path string) *BackendTLS {
	t := newBackendTLS()
	var st backendTLSState
	if !d.mapping(n, path, d.backendTLSFields(t, &st)) {
		return nil
	}
	// server_name still counts without verification: it is the SNI, which
	// a backend behind a TLS router (or serving several names) needs.
	if t.InsecureSkipVerify && st.ca != nil {
		d.errorf(st.ca, path+".ca", "ca is not used with insecure_skip_verify: true (line %d), which verifies nothing", line(st.skip))
	}
	switch {
	case st.cert != nil && st.key == nil:
		d.errorf(st.cert, path+".cert", "a client certificate needs its key too")
	case st.key != nil && st.cert == nil:
		d.errorf(st.key, path+".key", "a client key needs its cert too")
	case t.CertFile != "" && t.KeyFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			d.errorf(st.cert, path+".cert", "cannot load the client certificate and key as a pair: %v", err)
		}
	}
	return t
}

func (d *decoder) backendTLSFields(t *BackendTLS, st *backendTLSState) []field {
	return []field{
		{"server_name", d.textField(&t.ServerName, true, func(s string) (string, error) { return s, checkServerName(s) })},
		{"ca", val{
			set: func(v *yaml.Node, p string) {
				st.ca = v
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
			},
			get:  func() *yaml.Node { return absPath(t.CAFile) },
			kind: kindString,
		}},
		{"insecure_skip_verify", noting(&st.skip, d.boolField(&t.InsecureSkipVerify))},
		{"cert", d.fileField(&t.CertFile, &st.cert)},
		{"key", d.fileField(&t.KeyFile, &st.key)},
	}
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

// backendsState is what backends' keys note, for the checks across them.
type backendsState struct {
	sawStatic, sawDNS bool
	tls, proto        *yaml.Node
}

// backends decodes exactly one of static and dns.
func (d *decoder) backends(n *yaml.Node, path string, b *Backends) {
	var st backendsState
	if !d.mapping(n, path, d.backendsFields(b, &st)) {
		return
	}
	switch {
	case b.Protocol == ProtoH2 && st.tls == nil:
		d.errorf(st.proto, path+".protocol", "h2 is HTTP/2 over TLS: give backends.tls too (h2c is HTTP/2 without TLS)")
	case b.Protocol == ProtoH2C && st.tls != nil:
		d.errorf(st.proto, path+".protocol", "h2c is HTTP/2 without TLS, but backends.tls is given (line %d); use h2 for HTTP/2 over TLS", line(st.tls))
	}
	switch {
	case st.sawStatic && st.sawDNS:
		d.errorf(n, path, "give static or dns, not both")
		b.DNS = nil
	case !st.sawStatic && !st.sawDNS:
		d.errorf(n, path, "give static: [host:port, ...] or dns: {name, port}")
	}
}

func (d *decoder) backendsFields(b *Backends, st *backendsState) []field {
	return []field{
		{"static", val{
			set: func(v *yaml.Node, p string) { st.sawStatic = true; b.Static = d.static(v, p) },
			get: func() *yaml.Node {
				if b.DNS != nil || len(b.Static) == 0 {
					return nil
				}
				return strSeq(b.Static)
			},
			kind: listOf(kindString, 1, unbounded),
		}},
		{"dns", d.optional(func() bool { return b.DNS != nil },
			func() []field { return d.dnsFields(orNew(b.DNS, newDNS)) },
			func(v *yaml.Node, p string) { st.sawDNS = true; b.DNS = d.dns(v, p) })},
		{"tls", d.optional(func() bool { return b.TLS != nil },
			func() []field { return d.backendTLSFields(orNew(b.TLS, newBackendTLS), new(backendTLSState)) },
			func(v *yaml.Node, p string) { st.tls = v; b.TLS = d.backendTLS(v, p) })},
		{"protocol", noting(&st.proto, d.enumField(&b.Protocol, ProtoHTTP1, ProtoH2C, ProtoH2))},
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

func newDNS() *DNS { return &DNS{Interval: defaultDNSInterval} }

func (d *decoder) dns(n *yaml.Node, path string) *DNS {
	x := newDNS()
	if !d.mapping(n, path, d.dnsFields(x)) {
		return nil
	}
	return x
}

func (d *decoder) dnsFields(x *DNS) []field {
	return []field{
		{"name", d.textField(&x.Name, false, func(s string) (string, error) { return s, checkDNSName(s) }).need("the DNS name to resolve")},
		{"port", val{
			set: func(v *yaml.Node, p string) {
				if port, ok := d.integer(v, p, 1, 65535); ok {
					x.Port = uint16(port)
				}
			},
			get:  func() *yaml.Node { return intNode(int64(x.Port)) },
			kind: &kind{t: kInt, lo: 1, hi: 65535},
		}.need("")},
		{"interval", d.durationField(&x.Interval, time.Nanosecond)},
		{"server", d.textField(&x.Server, true, parseDNSServer)},
	}
}

func (d *decoder) healthFields(h *Health) []field {
	return []field{
		{"active", d.optional(func() bool { return h.Active != nil },
			func() []field { return d.activeHealthFields(orNew(h.Active, defaultActiveHealth), new(*yaml.Node)) },
			func(v *yaml.Node, p string) { h.Active = d.activeHealth(v, p) })},
		{"passive", d.section(func() []field { return d.passiveHealthFields(&h.Passive) }, nil)},
	}
}

// activeHealth decodes active checks. Writing the section turns them on;
// an empty section ({}) means on with every default.
func (d *decoder) activeHealth(n *yaml.Node, path string) *ActiveHealth {
	a := defaultActiveHealth()
	var timeoutNode *yaml.Node
	if !d.mapping(n, path, d.activeHealthFields(a, &timeoutNode)) {
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

func (d *decoder) activeHealthFields(a *ActiveHealth, timeoutNode **yaml.Node) []field {
	return []field{
		{"path", d.textField(&a.Path, false, func(s string) (string, error) { return s, checkProbePath(s) })},
		{"interval", d.durationField(&a.Interval, time.Nanosecond)},
		{"timeout", noting(timeoutNode, d.durationField(&a.Timeout, time.Nanosecond))},
		{"rise", d.intField(&a.Rise, 1, 1000)},
		{"fall", d.intField(&a.Fall, 1, 1000)},
	}
}

func (d *decoder) passiveHealthFields(h *PassiveHealth) []field {
	return []field{
		{"failures", d.intField(&h.Failures, 0, 1000)},
		{"cooldown", d.durationField(&h.Cooldown, time.Nanosecond)},
	}
}

func (d *decoder) timeoutsFields(t *Timeouts) []field {
	return []field{
		{"connect", d.durationField(&t.Connect, time.Nanosecond)},
		{"response", d.durationField(&t.Response, time.Nanosecond)},
	}
}

// maxRejectBody bounds the prebuilt rejection body.
const maxRejectBody = 64 << 10

// gRPC status names of reject.grpc_status.
var grpcStatusNames = []struct {
	name string
	code int
}{{"unavailable", GRPCUnavailable}, {"resource_exhausted", GRPCResourceExhausted}}

func (d *decoder) rejectFields(r *Reject) []field {
	grpcNames := make([]string, len(grpcStatusNames))
	for i, g := range grpcStatusNames {
		grpcNames[i] = g.name
	}
	return []field{
		{"status", val{
			set: func(v *yaml.Node, p string) {
				st, ok := d.integer(v, p, 0, 999)
				if !ok {
					return
				}
				if st != 503 && st != 429 {
					d.errorf(v, p, "status %d is not allowed; use 503 or 429", st)
					return
				}
				r.Status = int(st)
			},
			get:  func() *yaml.Node { return intNode(int64(r.Status)) },
			kind: &kind{t: kInt, ints: []int{503, 429}},
		}},
		{"body", d.textField(&r.Body, false, func(s string) (string, error) {
			if len(s) > maxRejectBody {
				return "", fmt.Errorf("body is %d bytes; the limit is %d", len(s), maxRejectBody)
			}
			return s, nil
		})},
		{"retry_after", val{
			set: func(v *yaml.Node, p string) {
				ra, ok := d.duration(v, p, time.Second)
				if !ok {
					return
				}
				if ra%time.Second != 0 {
					d.errorf(v, p, "%v is not whole seconds; Retry-After counts seconds", ra)
					return
				}
				r.RetryAfter = ra
			},
			get:  func() *yaml.Node { return durNode(r.RetryAfter) },
			kind: &kind{t: kDuration, minDur: time.Second},
		}},
		{"grpc_status", val{
			set: func(v *yaml.Node, p string) {
				if s, ok := d.enum(v, p, grpcNames...); ok {
					for _, g := range grpcStatusNames {
						if g.name == s {
							r.GRPCStatus = g.code
						}
					}
				}
			},
			get: func() *yaml.Node {
				for _, g := range grpcStatusNames {
					if g.code == r.GRPCStatus {
						return strNode(g.name)
					}
				}
				return intNode(int64(r.GRPCStatus)) // not a name: shown as is, and refused on reading
			},
			kind: &kind{t: kEnum, enum: grpcNames},
		}},
	}
}

// checkPeriods refuses a class whose policer period leaves no time within
// an SLA target: the batch test admits only when Q + (η + ⌈β/n⌉)·S ≤
// R_sla − d_i, so d_i ≥ R_sla rejects the class even on an idle farm.
func (d *decoder) checkPeriods(a *App, lines []pos, path string) {
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
