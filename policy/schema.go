package policy

import (
	"fmt"
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
	admin pos       // where admin.listen was written
	apps  []appMeta // parallel to Snapshot.Apps
}

type appMeta struct {
	path string // "apps[2]", for messages before the name is known
	at   pos    // the app's mapping
	name pos
	// listenGiven: the app has a listen key (even an invalid one), so it
	// does not take the default address.
	listenGiven bool
	listens     []pos // parallel to App.Listen
	hosts       []pos // parallel to App.Hosts
	// hostsBad / tlsBad: the section had errors, so checks that depend on
	// it are skipped rather than piling up follow-on errors.
	hostsBad bool
	tlsBad   bool
	tls      pos
	h2c      pos // where h2c was written (0: absent)
}

func (m *appMeta) listenPos(j int) pos {
	if j < len(m.listens) && m.listens[j].line > 0 {
		return m.listens[j]
	}
	return m.at
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
		d.add(pos{max(1, line(root)), 0}, "the policy is empty; at least one app is required")
		return
	}
	d.mapping(root, "", d.topFields(s, m))
}

// topFields is the top level's key table.
func (d *decoder) topFields(s *Snapshot, m *meta) []field {
	return []field{
		{"admin", d.section(func() []field { return d.adminFields(&s.Admin, m) }, nil)},
		{"log", d.section(func() []field { return d.logFields(&s.Log) }, nil)},
		{"server", d.section(func() []field { return d.serverFields(&s.Server, new(serverState)) }, func(v *yaml.Node, p string) { d.server(v, p, &s.Server) })},
		{"apps", val{
			set: func(v *yaml.Node, p string) { d.apps(v, p, s, m) },
			get: func() *yaml.Node {
				return emitList(len(s.Apps), false, func(i int) []field { return d.appFields(s.Apps[i], newAppState(nil)) })
			},
			kind: listOf(mapKind(func() []field { return d.appFields(defaultApp(), newAppState(nil)) }), 1, unbounded),
		}.need("list at least one app")},
		// Extension keys, as in docker compose: ignored, so that they can
		// hold anchors shared by apps (x-defaults: &defaults ...).
		{"x-*", val{set: func(*yaml.Node, string) {}, kind: &kind{t: kAny}}},
	}
}

func (d *decoder) adminFields(a *Admin, m *meta) []field {
	return []field{
		{"listen", val{
			set: func(v *yaml.Node, p string) {
				m.admin = posOf(v)
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
			},
			get: func() *yaml.Node {
				if a.Listen == "" {
					return strNode("off")
				}
				return strNode(a.Listen)
			},
			kind: kindString,
		}},
		{"allowed_hosts", val{
			set: func(v *yaml.Node, p string) { a.AllowedHosts = d.adminHosts(v, p) },
			get: func() *yaml.Node {
				if a.AllowedHosts == nil {
					return nil // the default: localhost and the machine's name
				}
				return strSeq(a.AllowedHosts)
			},
			kind: listOf(kindString, 0, unbounded).orNull(),
		}},
		{"pprof", d.boolField(&a.Pprof)},
		{"ready_requires_backend", d.boolField(&a.ReadyRequiresBackend)},
		// The runtime API's bearer token (secret.go): the dump writes the
		// file's name, never the token.
		{"token_file", val{
			set:  func(v *yaml.Node, p string) { d.tokenFile(v, p, a) },
			get:  func() *yaml.Node { return absPath(a.TokenFile) },
			kind: kindString,
		}},
	}
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

func (d *decoder) logFields(l *Log) []field {
	access := func() []field { return d.accessFields(l) }
	return []field{
		{"level", d.enumField(&l.Level, "trace", "debug", "info", "warn", "error")},
		{"format", d.enumField(&l.Format, "text", "json")},
		// log.access: a bool (the shorthand for enabled, with the
		// defaults), or a mapping. The dump writes the mapping.
		{"access", val{
			set: func(v *yaml.Node, p string) {
				if r := resolve(v); r != nil && r.Kind == yaml.ScalarNode && !isNull(r) {
					if x, ok := d.boolean(v, p); ok {
						l.Access = x
					}
					return
				}
				d.mapping(v, p, access())
			},
			get:  func() *yaml.Node { return emit(access()) },
			kind: &kind{t: kUnion, alts: []*kind{kindBool, mapKind(access)}},
		}},
	}
}

func (d *decoder) accessFields(l *Log) []field {
	a := &l.AccessLog
	return []field{
		{"enabled", d.boolField(&l.Access)},
		{"output", d.textField(&a.Output, false, func(s string) (string, error) {
			if s != "stdout" && s != "stderr" && !filepath.IsAbs(s) {
				return "", fmt.Errorf("%q: write stdout, stderr or an absolute file path", s)
			}
			return s, nil
		})},
		{"format", d.enumField(&a.Format, "text", "json")},
		{"rate", d.intField(&a.Rate, 0, 1<<30)},
		{"reject_rate", d.intField(&a.RejectRate, 0, 1<<30)},
	}
}

// serverState is where server's buffer sizes were written, for the check
// that ties them.
type serverState struct{ buf, total, rbuf, rtotal, rfile, rftotal *yaml.Node }

func (d *decoder) server(n *yaml.Node, path string, s *Server) {
	var st serverState
	d.mapping(n, path, d.serverFields(s, &st))
	// request_buffer_total below request_buffer would answer 503 to every
	// body between them: refused, at the line of whichever was set.
	if s.RequestBuffer > 0 && s.RequestBufferTotal > 0 && s.RequestBufferTotal < s.RequestBuffer && (st.buf != nil || st.total != nil) {
		at := st.total
		if at == nil {
			at = st.buf
		}
		d.errorf(at, joinPath(path, "request_buffer_total"), "%d is smaller than request_buffer (%d): every body between them would get 503; raise it, or 0 for no cap", s.RequestBufferTotal, s.RequestBuffer)
	}
	// The same for the responses' totals; and a memory buffer below one
	// block would hold nothing.
	if st.rbuf != nil && s.ResponseBuffer > 0 && s.ResponseBuffer < 16<<10 {
		d.errorf(st.rbuf, joinPath(path, "response_buffer"), "%d is below 16KiB, the step memory is taken in: it would hold nothing; 0 turns buffering off", s.ResponseBuffer)
	}
	if s.ResponseBuffer > 0 && s.ResponseBufferTotal > 0 && s.ResponseBufferTotal < s.ResponseBuffer && (st.rbuf != nil || st.rtotal != nil) {
		at := st.rtotal
		if at == nil {
			at = st.rbuf
		}
		d.errorf(at, joinPath(path, "response_buffer_total"), "%d is smaller than response_buffer (%d): no response could fill its buffer; raise it, or 0 for no cap", s.ResponseBufferTotal, s.ResponseBuffer)
	}
	if s.ResponseTempFile > 0 && s.ResponseTempFileTotal > 0 && s.ResponseTempFileTotal < s.ResponseTempFile && (st.rfile != nil || st.rftotal != nil) {
		at := st.rftotal
		if at == nil {
			at = st.rfile
		}
		d.errorf(at, joinPath(path, "response_temp_file_total"), "%d is smaller than response_temp_file (%d): no response could fill its file; raise it, or 0 for no cap", s.ResponseTempFileTotal, s.ResponseTempFile)
	}
}

func (d *decoder) serverFields(s *Server, st *serverState) []field {
	return []field{
		{"read_header_timeout", d.durationField(&s.ReadHeaderTimeout, time.Nanosecond)},
		{"body_timeout", d.durationField(&s.BodyTimeout, time.Nanosecond)},
		{"idle_timeout", d.durationField(&s.IdleTimeout, time.Nanosecond)},
		{"write_timeout", d.durationField(&s.WriteTimeout, 0)},
		{"request_buffer", noting(&st.buf, d.sizeField(&s.RequestBuffer, 0, 1<<30))},
		{"request_buffer_total", noting(&st.total, d.sizeField(&s.RequestBufferTotal, 0, math.MaxInt64))},
		{"response_buffer", noting(&st.rbuf, d.sizeField(&s.ResponseBuffer, 0, 1<<30))},
		{"response_buffer_total", noting(&st.rtotal, d.sizeField(&s.ResponseBufferTotal, 0, math.MaxInt64))},
		{"response_temp_file", noting(&st.rfile, d.sizeField(&s.ResponseTempFile, 0, math.MaxInt64))},
		{"response_temp_file_total", noting(&st.rftotal, d.sizeField(&s.ResponseTempFileTotal, 0, math.MaxInt64))},
		{"response_temp_dir", d.textField(&s.ResponseTempDir, true, func(v string) (string, error) {
			if v != "" && !filepath.IsAbs(v) {
				return "", fmt.Errorf("%q: write an absolute directory path, or leave it out for the system's", v)
			}
			return v, nil
		})},
		{"body_min_rate", d.sizeField(&s.BodyMinRate, 0, 1<<40)},
		{"max_header_bytes", d.intSizeField(&s.MaxHeaderBytes, 1<<10, 16<<20)},
		{"max_conns", d.intField(&s.MaxConns, 1, math.MaxInt32)},
		{"shutdown_timeout", d.durationField(&s.ShutdownTimeout, time.Nanosecond)},
	}
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
		am := appMeta{path: path + "[" + strconv.Itoa(i) + "]", at: posOf(e)}
		if !d.app(e, am.path, a, &am) {
			continue
		}
		a.Index = len(s.Apps)
		s.Apps = append(s.Apps, a)
		m.apps = append(m.apps, am)
	}
}
