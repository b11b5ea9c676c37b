package policy

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults that other packages (flag defaults, docs) may want to name.
const (
	// DefaultListen is the listen address of the first app that gives none.
	DefaultListen = "127.0.0.1:8080"
	// DefaultAdminListen is the admin listener's address.
	DefaultAdminListen = "127.0.0.1:9901"
)

// defaultSnapshot holds every top-level default. Decoding overwrites what the
// file gives, so an explicit zero stays zero.
func defaultSnapshot() *Snapshot {
	return &Snapshot{
		Admin: Admin{Listen: DefaultAdminListen},
		Log:   Log{Level: "info", Format: "text", AccessLog: AccessLog{Output: "stdout", Format: "text", Rate: 1000, RejectRate: 100}},
		Server: Server{
			ReadHeaderTimeout:     10 * time.Second,
			BodyTimeout:           5 * time.Minute,
			IdleTimeout:           60 * time.Second,
			WriteTimeout:          60 * time.Second,
			RequestBuffer:         1 << 20,
			RequestBufferTotal:    256 << 20,
			ResponseBuffer:        1 << 20,
			ResponseBufferTotal:   256 << 20,
			ResponseTempFile:      1 << 30,
			ResponseTempFileTotal: 1 << 30,
			BodyMinRate:           1 << 10,
			MaxHeaderBytes:        16 << 10,
			MaxConns:              100000,
			ShutdownTimeout:       30 * time.Second,
		},
	}
}

// meta records where things were written, for the checks that run after
// decoding (listeners, duplicates). Snapshot carries no positions: it is
// what the rest of sentry reads.
type meta struct {
	adminLine int
	apps      []appMeta // parallel to Snapshot.Apps
}

type appMeta struct {
	path     string // "apps[2]", for messages before the name is known
	line     int    // the app's mapping
	nameLine int
	// listenGiven: the app has a listen key (even an invalid one), so it
	// does not take the default address.
	listenGiven bool
	listenLines []int // parallel to App.Listen
	hostLines   []int // parallel to App.Hosts
	// hostsBad / tlsBad: the section had errors, so checks that depend on
	// it are skipped rather than piling up follow-on errors.
	hostsBad bool
	tlsBad   bool
	tlsLine  int
	h2cLine  int // where h2c was written (0: absent)
}

func (m *appMeta) listenLine(j int) int {
	if j < len(m.listenLines) && m.listenLines[j] > 0 {
		return m.listenLines[j]
	}
	return m.line
}

// top decodes the document root.
func (d *decoder) top(doc *yaml.Node, s *Snapshot, m *meta) {
	root := doc
	if doc.Kind == yaml.DocumentNode {
		root = nil
		if len(doc.Content) > 0 {
			root = doc.Content[0]
		}
	}
	if isNull(resolve(root)) {
		d.add(max(1, line(root)), "the policy is empty; at least one app is required")
		return
	}
	sawApps := false
	ok := d.mapping(root, "", []field{
		{"admin", func(v *yaml.Node, p string) { d.admin(v, p, &s.Admin, m) }},
		{"log", func(v *yaml.Node, p string) { d.log(v, p, &s.Log) }},
		{"server", func(v *yaml.Node, p string) { d.server(v, p, &s.Server) }},
		{"apps", func(v *yaml.Node, p string) { sawApps = true; d.apps(v, p, s, m) }},
		// Extension keys, as in docker compose: ignored, so that they can
		// hold anchors shared by apps (x-defaults: &defaults ...).
		{"x-*", func(*yaml.Node, string) {}},
	})
	if ok && !sawApps {
		d.errorf(root, "", "apps is required: list at least one app")
	}
}

func (d *decoder) admin(n *yaml.Node, path string, a *Admin, m *meta) {
	d.mapping(n, path, []field{
		{"listen", func(v *yaml.Node, p string) {
			m.adminLine = line(v)
			s, ok := d.str(v, p)
			switch {
			case !ok:
			case s == "off":
				a.Listen = ""
			case s == "":
				d.errorf(v, p, "empty address; write off to disable the admin listener")
			default:
				addr, err := parseListenAddr(s)
				if err != nil {
					d.errorf(v, p, "%v", err)
					return
				}
				a.Listen = addr
			}
		}},
		{"allowed_hosts", func(v *yaml.Node, p string) { a.AllowedHosts = d.adminHosts(v, p) }},
		{"pprof", d.boolField(&a.Pprof)},
		{"ready_requires_backend", d.boolField(&a.ReadyRequiresBackend)},
	})
}

// adminHosts decodes admin.allowed_hosts: host names or IPs as in an app's
// hosts (port ignored), or "*" alone. A null value is an empty list (IP
// literals only), as for every list.
func (d *decoder) adminHosts(n *yaml.Node, path string) []string {
	items, _ := d.strList(n, path, false)
	out := []string{}
	seen := map[string]int{}
	for _, it := range items {
		if it.s == AnyHost {
			if len(items) > 1 {
				d.errorf(it.node, it.path, "%q accepts every host; list nothing else with it", AnyHost)
				continue
			}
			out = append(out, AnyHost)
			continue
		}
		if strings.Contains(it.s, "*") {
			d.errorf(it.node, it.path, "host %q: wildcards are not supported; list each host, or write %q alone to accept every host", it.s, AnyHost)
			continue
		}
		h, err := parseHost(it.s)
		if err != nil {
			d.errorf(it.node, it.path, "%v", err)
			continue
		}
		if first, dup := seen[h]; dup {
			d.errorf(it.node, it.path, "host %q is listed twice (first at line %d)", h, first)
			continue
		}
		seen[h] = line(it.node)
		out = append(out, h)
	}
	return out
}

func (d *decoder) log(n *yaml.Node, path string, l *Log) {
	d.mapping(n, path, []field{
		{"level", d.enumField(&l.Level, "trace", "debug", "info", "warn", "error")},
		{"format", d.enumField(&l.Format, "text", "json")},
		{"access", func(v *yaml.Node, p string) { d.accessLog(v, p, l) }},
	})
}

// accessLog decodes log.access: a bool (the shorthand for enabled, with
// the defaults), or a mapping.
func (d *decoder) accessLog(n *yaml.Node, path string, l *Log) {
	if r := resolve(n); r != nil && r.Kind == yaml.ScalarNode && !isNull(r) {
		if x, ok := d.boolean(n, path); ok {
			l.Access = x
		}
		return
	}
	a := &l.AccessLog
	d.mapping(n, path, []field{
		{"enabled", d.boolField(&l.Access)},
		{"output", func(v *yaml.Node, p string) {
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			if s != "stdout" && s != "stderr" && !filepath.IsAbs(s) {
				d.errorf(v, p, "%q: write stdout, stderr or an absolute file path", s)
				return
			}
			a.Output = s
		}},
		{"format", d.enumField(&a.Format, "text", "json")},
		{"rate", d.intField(&a.Rate, 0, 1<<30)},
		{"reject_rate", d.intField(&a.RejectRate, 0, 1<<30)},
	})
}

func (d *decoder) server(n *yaml.Node, path string, s *Server) {
	// request_buffer_total below request_buffer would answer 503 to every
	// body between them: refused, at the line of whichever was set.
	var bufN, totalN *yaml.Node
	setBuf := d.sizeField(&s.RequestBuffer, 0, 1<<30)
	setTotal := d.sizeField(&s.RequestBufferTotal, 0, math.MaxInt64)
	defer func() {
		if s.RequestBuffer > 0 && s.RequestBufferTotal > 0 && s.RequestBufferTotal < s.RequestBuffer && (bufN != nil || totalN != nil) {
			at := totalN
			if at == nil {
				at = bufN
			}
			d.errorf(at, joinPath(path, "request_buffer_total"), "%d is smaller than request_buffer (%d): every body between them would get 503; raise it, or 0 for no cap", s.RequestBufferTotal, s.RequestBuffer)
		}
	}()
	// The same for the responses' totals; and a memory buffer below one
	// block would hold nothing.
	var rbufN, rtotalN, rfileN, rftotalN *yaml.Node
	setRBuf := d.sizeField(&s.ResponseBuffer, 0, 1<<30)
	setRTotal := d.sizeField(&s.ResponseBufferTotal, 0, math.MaxInt64)
	setRFile := d.sizeField(&s.ResponseTempFile, 0, math.MaxInt64)
	setRFTotal := d.sizeField(&s.ResponseTempFileTotal, 0, math.MaxInt64)
	defer func() {
		if rbufN != nil && s.ResponseBuffer > 0 && s.ResponseBuffer < 16<<10 {
			d.errorf(rbufN, joinPath(path, "response_buffer"), "%d is below 16KiB, the step memory is taken in: it would hold nothing; 0 turns buffering off", s.ResponseBuffer)
		}
		if s.ResponseBuffer > 0 && s.ResponseBufferTotal > 0 && s.ResponseBufferTotal < s.ResponseBuffer && (rbufN != nil || rtotalN != nil) {
			at := rtotalN
			if at == nil {
				at = rbufN
			}
			d.errorf(at, joinPath(path, "response_buffer_total"), "%d is smaller than response_buffer (%d): no response could fill its buffer; raise it, or 0 for no cap", s.ResponseBufferTotal, s.ResponseBuffer)
		}
		if s.ResponseTempFile > 0 && s.ResponseTempFileTotal > 0 && s.ResponseTempFileTotal < s.ResponseTempFile && (rfileN != nil || rftotalN != nil) {
			at := rftotalN
			if at == nil {
				at = rfileN
			}
			d.errorf(at, joinPath(path, "response_temp_file_total"), "%d is smaller than response_temp_file (%d): no response could fill its file; raise it, or 0 for no cap", s.ResponseTempFileTotal, s.ResponseTempFile)
		}
	}()
	d.mapping(n, path, []field{
		{"read_header_timeout", d.durationField(&s.ReadHeaderTimeout, time.Nanosecond)},
		{"body_timeout", d.durationField(&s.BodyTimeout, time.Nanosecond)},
		{"idle_timeout", d.durationField(&s.IdleTimeout, time.Nanosecond)},
		{"write_timeout", d.durationField(&s.WriteTimeout, 0)},
		{"request_buffer", func(v *yaml.Node, p string) { bufN = v; setBuf(v, p) }},
		{"request_buffer_total", func(v *yaml.Node, p string) { totalN = v; setTotal(v, p) }},
		{"response_buffer", func(v *yaml.Node, p string) { rbufN = v; setRBuf(v, p) }},
		{"response_buffer_total", func(v *yaml.Node, p string) { rtotalN = v; setRTotal(v, p) }},
		{"response_temp_file", func(v *yaml.Node, p string) { rfileN = v; setRFile(v, p) }},
		{"response_temp_file_total", func(v *yaml.Node, p string) { rftotalN = v; setRFTotal(v, p) }},
		{"response_temp_dir", func(v *yaml.Node, p string) {
			s2, ok := d.str(v, p)
			if !ok {
				return
			}
			if s2 != "" && !filepath.IsAbs(s2) {
				d.errorf(v, p, "%q: write an absolute directory path, or leave it out for the system's", s2)
				return
			}
			s.ResponseTempDir = s2
		}},
		{"body_min_rate", d.sizeField(&s.BodyMinRate, 0, 1<<40)},
		{"max_header_bytes", d.intSizeField(&s.MaxHeaderBytes, 1<<10, 16<<20)},
		{"max_conns", d.intField(&s.MaxConns, 1, math.MaxInt32)},
		{"shutdown_timeout", d.durationField(&s.ShutdownTimeout, time.Nanosecond)},
	})
}

func (d *decoder) apps(n *yaml.Node, path string, s *Snapshot, m *meta) {
	r := resolve(n)
	if isNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
		d.errorf(n, path, "at least one app is required")
		return
	}
	if r.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list of apps, got %s", describe(r))
		return
	}
	for i, e := range r.Content {
		if !d.spend() {
			return
		}
		a := defaultApp()
		am := appMeta{path: path + "[" + strconv.Itoa(i) + "]", line: line(e)}
		if !d.app(e, am.path, a, &am) {
			continue
		}
		a.Index = len(s.Apps)
		s.Apps = append(s.Apps, a)
		m.apps = append(m.apps, am)
	}
}
