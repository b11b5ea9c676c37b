package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/proxy"
)

// Stamped by a build script (scripts/release.sh, the Dockerfile):
//
//	go build -ldflags "-X main.buildVersion=v1.2.3 -X main.buildCommit=$(git rev-parse HEAD)"
//
// Without them the Go toolchain's own stamp is used (runtime/debug's
// vcs.revision and vcs.modified, present when the binary was built with
// `go build` in a git checkout, and the module version with `go install
// module@version`).
var (
	buildVersion = ""
	buildCommit  = ""
)

// build is what a binary says about itself: `sentry version`, the
// sentry_build_info metric and the start-up log line.
type build struct {
	Version  string // release version; "devel" when nothing says
	Commit   string // the VCS revision; "unknown" when nothing says
	Modified bool   // built from a work tree with uncommitted changes
	Go       string // the Go toolchain's version
}

// buildOf reads the stamps: the -ldflags values first, then the build
// information the Go toolchain embedded (bi; nil when there is none).
func buildOf(version, commit string, bi *debug.BuildInfo) build {
	b := build{Version: version, Commit: commit, Go: runtime.Version()}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				// Only about the revision it comes with: a stamped commit
				// is the release script's, which builds a clean tree.
				b.Modified = s.Value == "true" && commit == ""
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// thisBuild is this binary's build.
func thisBuild() build {
	bi, _ := debug.ReadBuildInfo()
	return buildOf(buildVersion, buildCommit, bi)
}

// version is the one-word version for logs: the version, and the short
// commit when the version does not name a release.
func version() string {
	b := thisBuild()
	if b.Version != "devel" || b.Commit == "unknown" {
		return b.Version
	}
	v := "devel-" + short(b.Commit)
	if b.Modified {
		v += "-modified"
	}
	return v
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// printVersion is `sentry version`. The engine is the one the
// environment selects with the default options; a policy may choose
// another (sentry_build_info's engine label shows the one in force).
func printVersion(w io.Writer) {
	b := thisBuild()
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "sentry %s\ncommit:   %s\ngo:       %s\nplatform: %s/%s\nengine:   %s\n",
		b.Version, commit, b.Go, runtime.GOOS, runtime.GOARCH, proxy.EngineName(proxy.EngineAuto, proxy.H2Auto))
}

// buildInfoCollector is sentry_build_info: always 1, with the build's
// labels and the engine in force, read from the proxy at scrape time so
// that it follows a change of engine.
type buildInfoCollector struct {
	desc   *prometheus.Desc
	engine func() string
}

func newBuildInfo(engine func() string) *buildInfoCollector {
	b := thisBuild()
	return &buildInfoCollector{
		desc: prometheus.NewDesc("sentry_build_info",
			"Always 1: the build's version, VCS revision (modified: built from a changed work tree), Go version, platform, and the front-end engine in force.",
			[]string{"engine"}, prometheus.Labels{"version": b.Version, "revision": b.Commit,
				"modified": fmt.Sprint(b.Modified), "goversion": b.Go, "goos": runtime.GOOS, "goarch": runtime.GOARCH}),
		engine: engine,
	}
}

func (c *buildInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *buildInfoCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, c.engine())
}
