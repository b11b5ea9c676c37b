package policy

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
)

// Parse decodes, defaults and validates a policy. source names the policy in
// error messages and in Snapshot.Source; when it is a file path (anything
// not written "<like-this>"), relative TLS file names are resolved against
// its directory, otherwise against the working directory.
//
// On failure Parse returns a nil Snapshot and an Errors holding every
// problem found, each with its line.
func Parse(source string, data []byte) (*Snapshot, error) {
	return parse(source, data, nodeBudget)
}

// parse is Parse with the node budget as a parameter, for tests.
func parse(source string, data []byte, budget int) (*Snapshot, error) {
	return parseWith(source, data, budget, os.Hostname)
}

// parseWith is parse with the host name source as a parameter, for tests
// of partition.index_from_hostname.
func parseWith(source string, data []byte, budget int, hostname func() (string, error)) (*Snapshot, error) {
	base := ""
	if !strings.HasPrefix(source, "<") {
		base = filepath.Dir(source)
	}
	doc, perr := parseYAML(source, data)
	if perr != nil {
		return nil, Errors{*perr}
	}
	d := newDecoder(source, base, budget)
	d.hostname = hostname
	s := defaultSnapshot()
	s.Source = source
	s.Hash = sha256.Sum256(data)
	var m meta
	d.top(doc, s, &m)
	finish(s, &m, &d.collector)
	if err := d.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// Load reads and parses the policy file at path.
func Load(path string) (*Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// FlagsSource is Snapshot.Source (and Error.File) for a policy built by
// FromFlags.
const FlagsSource = "<flags>"

// FromFlags builds the quick policy of `sentry run -listen -backend -admin`:
// one app named "default", with every default, no hosts, serving listen
// (comma-separated host:port addresses; "" means DefaultListen) and
// proxying to backends (each element may itself be comma-separated). admin
// is the admin address; "" means DefaultAdminListen and "off" disables it.
// Errors carry File "<flags>" and no line.
func FromFlags(listen string, backends []string, admin string) (*Snapshot, error) {
	c := &collector{file: FlagsSource}
	s := defaultSnapshot()
	s.Source = FlagsSource
	a := defaultApp()
	a.Name = "default"

	switch admin {
	case "":
	case "off":
		s.Admin.Listen = ""
	default:
		addr, err := parseListenAddr(admin)
		if err != nil {
			c.add(pos{}, "-admin: %v", err)
		} else {
			s.Admin.Listen = addr
		}
	}

	am := appMeta{path: "-listen"}
	if ls := splitList(listen); len(ls) > 0 {
		am.listenGiven = true
		seen := map[string]bool{}
		for _, l := range ls {
			addr, err := parseListenAddr(l)
			switch {
			case err != nil:
				c.add(pos{}, "-listen: %v", err)
			case seen[addr]:
				c.add(pos{}, "-listen: %s is given twice", addr)
			default:
				seen[addr] = true
				a.Listen = append(a.Listen, addr)
			}
		}
	}

	seen := map[string]bool{}
	for _, b := range backends {
		for _, e := range splitList(b) {
			addr, err := parseBackendAddr(e)
			switch {
			case err != nil:
				c.add(pos{}, "-backend: %v", err)
			case seen[addr]:
				c.add(pos{}, "-backend: %s is given twice", addr)
			default:
				seen[addr] = true
				a.Backends.Static = append(a.Backends.Static, addr)
			}
		}
	}
	if len(a.Backends.Static) == 0 && !hasPrefixErr(c, "-backend") {
		c.add(pos{}, "-backend: at least one backend address (host:port) is required")
	}

	s.Apps = []*App{a}
	m := meta{apps: []appMeta{am}}
	finish(s, &m, c)
	if err := c.err(); err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write([]byte("listen=" + strings.Join(a.Listen, ",") + "\nbackend=" + strings.Join(a.Backends.Static, ",") + "\nadmin=" + s.Admin.Listen + "\n"))
	h.Sum(s.Hash[:0])
	return s, nil
}

func hasPrefixErr(c *collector, prefix string) bool {
	for _, e := range c.errs {
		if strings.HasPrefix(e.Msg, prefix) {
			return true
		}
	}
	return false
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
