package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	loadOnce sync.Once
	loaded   *Repo
	loadErr  error
)

// repo loads the real repository (go list, cmd/sentry's flags, the
// metrics) once for the package's tests.
func repo(t *testing.T) *Repo {
	t.Helper()
	loadOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			loadErr = err
			return
		}
		loaded, loadErr = Load(root)
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// TestRepoDocs: no doc cites a file, package, subcommand, flag, metric or
// policy key that does not exist.
func TestRepoDocs(t *testing.T) {
	r := repo(t)
	root := r.Root
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rel := range docs {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Check(rel, string(data)) {
			t.Error(p)
			n++
		}
	}
	if r.Counts["key"] < 100 || r.Counts["metric"] < 100 || r.Counts["path"] < 100 || r.Counts["command"] < 10 || r.Counts["package"] < 20 {
		t.Errorf("too few references checked (%v): is the check still reading the docs?", r.Counts)
	}
	t.Logf("%d docs, %d packages, %d subcommands, %d metrics; checked %v; %d problems", len(docs), len(r.Packages), len(r.Commands), len(r.Metrics), r.Counts, n)
}

// unexported are metric names the code defines that the sentry binary does
// not export: collectors of library packages that sentry's wiring does not
// register (control exports threshold mode's state itself, and gives the
// admission mode switch no Registerer).
var unexported = map[string]string{
	"sentry_threshold_offered_server_seconds": "thresholdac.NewCollector, not used by control",
	"sentry_admission_revert_after_seconds":   "admission.SwitchConfig.Registerer, left nil by control",
}

// TestMetricsDocumented: docs/metrics.md has a row for every metric the
// binary registers, and only for those.
func TestMetricsDocumented(t *testing.T) {
	r := repo(t)
	data, err := os.ReadFile(filepath.Join(r.Root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "| `sentry_"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows["sentry_"+name] = true
		}
	}
	for m := range r.Metrics {
		if !rows[m] && unexported[m] == "" {
			t.Errorf("docs/metrics.md has no row for %s", m)
		}
	}
	for m := range rows {
		if !r.Metrics[m] || unexported[m] != "" {
			t.Errorf("docs/metrics.md has a row for %s, which sentry does not register", m)
		}
	}
	for m := range unexported {
		if !r.Metrics[m] {
			t.Errorf("%s is listed as unexported but no longer defined: remove it from the list", m)
		}
	}
}

// TestLayout: the README's Layout table names every package.
func TestLayout(t *testing.T) {
	r := repo(t)
	data, err := os.ReadFile(filepath.Join(r.Root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(data), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	named := map[string]bool{}
	for _, m := range spanRE.FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}
	for p := range r.Packages {
		if !named[p] {
			t.Errorf("README.md's Layout table does not name the package %s", p)
		}
	}
	for p := range named {
		if !r.Packages[p] {
			t.Errorf("README.md's Layout table names %s, which is not a package", p)
		}
	}
}

// TestDocSizes: the README stays a README (at most 15 KiB) and every
// doc.go a design essay (at most 400 lines).
func TestDocSizes(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 15*1024 {
		t.Errorf("README.md is %d bytes, more than 15 KiB: move reference material to docs/", fi.Size())
	}
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range docs {
		if filepath.Base(rel) != "doc.go" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n > 400 {
			t.Errorf("%s has %d lines, more than 400", rel, n)
		}
	}
}

// fakeRepo is a small repository in a temporary directory: a package a/b
// with a file, docs/guide.md with two headings, and a .gitignore'd out/.
func fakeRepo(t *testing.T) *Repo {
	root := t.TempDir()
	for name, body := range map[string]string{
		"a/b/real.go":    "package b\n",
		"a/b/doc.go":     "// Package b is real.\npackage b\n",
		"docs/guide.md":  "# Guide\n\n## How it works (`admission.mode`)\n",
		"deploy/x.yaml":  "x: 1\n",
		".gitignore":     "/out/\n",
		"scripts/run.sh": "true\n",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &Repo{
		Root:     root,
		Packages: map[string]bool{"a/b": true},
		Commands: map[string]map[string]bool{"run": {"config": true, "watch": true}, "version": {}},
		Metrics:  map[string]bool{"sentry_requests_total": true, "sentry_wait_seconds": true},
	}
}

// TestGoodReferences: references to things that exist pass, as do names
// the check must leave alone (other tools' packages, outputs, URLs).
func TestGoodReferences(t *testing.T) {
	r := fakeRepo(t)
	doc := strings.Join([]string{
		"See [the guide](docs/guide.md#how-it-works-admissionmode) and [deploy](deploy/).",
		"The code is in a/b/real.go and package a/b (package `b`, the `b` package); real.go too.",
		"Run `sentry run -config FILE -watch 10s` or `sentry version`; scripts/run.sh.",
		"```sh",
		"./sentry run -config deploy/x.yaml",
		"go run ./cmd/sentry -h",
		"```",
		"Metrics: sentry_requests_total, sentry_wait_seconds_bucket, `sentry_wait_*`.",
		"Keys: apps[].admission.batch.queue_cap, `server.request_buffer`, classes[].terminate.lower, log.access.output,",
		"admission.mode, timeouts.connect, rules[].path_prefix, sla.targets.",
		"Not ours: net/http, x/net/http2, tls.Config, e.g. this, proxy.New, https://example.com/a/b.go, policy.yaml, out/peers.md, tls.sh.",
	}, "\n")
	doc = strings.Replace(doc, "tls.sh", "run.sh", 1)
	for _, p := range r.Check("README.md", doc) {
		t.Error(p)
	}
}

// TestPlantedMistakes: each kind of bad reference is reported, at its line.
func TestPlantedMistakes(t *testing.T) {
	r := fakeRepo(t)
	cases := []struct{ line, want string }{
		{"See [the guide](docs/gide.md).", "link to docs/gide.md"},
		{"See [the guide](docs/guide.md#no-such-heading).", "no heading #no-such-heading"},
		{"The code is in a/b/gone.go.", "no file or directory a/b/gone.go"},
		{"The loop is in evloop_linux.go.", "no file named evloop_linux.go"},
		{"It lives in package a/c.", "no package a/c"},
		{"See the `zz` package.", "no package zz"},
		{"Run `sentry serve -config FILE`.", `no subcommand "serve"`},
		{"Run `sentry run -config FILE -dump`.", "sentry run has no flag -dump"},
		{"Alert on sentry_request_total.", "no metric sentry_request_total"},
		{"Graph `sentry_nothing_*`.", "no metric starts with sentry_nothing_"},
		{"Set admission.batch.queue_size.", "no policy key admission.batch.queue_size"},
		{"Set `apps[].tls.certificate`.", "no policy key apps[].tls.certificate"},
		{"Set server.response_buffer_maxx.", "no policy key server.response_buffer_maxx"},
		{"Read ../shared/DESIGN.md.", "outside the repository"},
		{"Read /work/main/README.md.", "outside the repository"},
	}
	lines := make([]string, len(cases))
	for i, c := range cases {
		lines[i] = c.line
	}
	got := r.Check("README.md", strings.Join(lines, "\n"))
	for i, c := range cases {
		found := false
		for _, p := range got {
			if p.Line == i+1 && strings.Contains(p.Msg, c.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("line %d %q: no problem %q; got %v", i+1, c.line, c.want, got)
		}
	}
}

// TestPolicyKeyExists asks the real decoder.
func TestPolicyKeyExists(t *testing.T) {
	for key, want := range map[string]bool{
		"apps[].admission.mode":             true,
		"apps[].classes[].terminate.upper":  true,
		"server.request_buffer_total":       true,
		"log.access":                        true,
		"apps[].sla.targets[].below":        true,
		"apps[].backends.dns.server":        true,
		"apps[].admission.batch.queue_capx": false,
		"apps.admission.mode":               false, // apps is a list
		"apps[].sla[].percentile":           false, // sla is a mapping
		"server.nope":                       false,
	} {
		if got := PolicyKeyExists(key); got != want {
			t.Errorf("PolicyKeyExists(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestSlug: GitHub's heading anchors, as the docs link them.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"§7 SEDA adaptive controller (`admission.mode: adaptive`)": "7-seda-adaptive-controller-admissionmode-adaptive",
		"§2 Batch admission (Cataclysm §3.1–3.2)":                  "2-batch-admission-cataclysm-3132",
		"`apps[].server_timing`":                                   "appsserver_timing",
		"HTTP/2 to backends, and gRPC":                             "http2-to-backends-and-grpc",
	} {
		if got := Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}
