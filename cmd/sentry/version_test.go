package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildOf: the -ldflags stamps win; without them the toolchain's
// vcs.revision, vcs.modified and module version are used; with nothing,
// "devel" and "unknown", never "(devel)".
func TestBuildOf(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            build
	}{
		{"nothing", "", "", nil, build{Version: "devel", Commit: "unknown"}},
		{"go run", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, build{Version: "devel", Commit: "unknown"}},
		{"go build in a checkout", "", "", vcs, build{Version: "devel", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true}},
		{"go install module@v", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, build{Version: "v1.4.0", Commit: "unknown"}},
		{"release script", "v1.5.0", "fedcba9876543210", vcs, build{Version: "v1.5.0", Commit: "fedcba9876543210"}},
		{"version stamped only", "v1.5.0", "", vcs, build{Version: "v1.5.0", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true}},
	} {
		got := buildOf(c.version, c.commit, c.bi)
		c.want.Go = runtime.Version()
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestVersionOutput: `sentry version` names the version, commit, Go
// version, platform and engine, one per line after the first.
func TestVersionOutput(t *testing.T) {
	saved := [2]string{buildVersion, buildCommit}
	defer func() { buildVersion, buildCommit = saved[0], saved[1] }()
	buildVersion, buildCommit = "v9.9.9", "abc123"
	var out bytes.Buffer
	printVersion(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"sentry v9.9.9", "commit:   abc123", "go:       " + runtime.Version(),
		"platform: " + runtime.GOOS + "/" + runtime.GOARCH, "engine:   "}
	if len(lines) != len(want) {
		t.Fatalf("version output:\n%s", out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) || lines[i] == "engine:   " {
			t.Errorf("line %d: %q, want %q…", i+1, lines[i], w)
		}
	}
	if version() != "v9.9.9" {
		t.Errorf("version() = %q", version())
	}
	buildVersion = ""
	if v := version(); v != "devel-abc123" {
		t.Errorf("version() unstamped with a commit = %q, want devel-abc123", v)
	}
}

// TestBuildInfoMetric: sentry_build_info carries the build's labels and
// the proxy's engine.
func TestBuildInfoMetric(t *testing.T) {
	saved := [2]string{buildVersion, buildCommit}
	defer func() { buildVersion, buildCommit = saved[0], saved[1] }()
	buildVersion, buildCommit = "v9.9.9", "abc123"
	d := testDaemon(t, parse(t, "apps:\n  - name: web\n    listen: "+freeAddr(t)+"\n    backends: {static: [127.0.0.1:1]}\n"))
	want := map[string]string{"version": "v9.9.9", "revision": "abc123", "modified": "false", "goversion": runtime.Version(),
		"goos": runtime.GOOS, "goarch": runtime.GOARCH, "engine": d.proxy.EngineName()}
	if v, ok := metric(t, d, "sentry_build_info", want); !ok || v != 1 {
		t.Errorf("sentry_build_info%v: %v %v", want, v, ok)
	}
	if d.proxy.EngineName() == "" {
		t.Error("empty engine")
	}
}
