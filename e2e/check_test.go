package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestCheckReportsEveryErrorWithLines(t *testing.T) {
	bad := writeFile(t, "bad.yaml", `
apps:
  - name: web
    listen: 127.0.0.1:8080
    backendz:
      static: [127.0.0.1:9000]
    timeouts:
      connect: 5 seconds
    backends:
      static: [not-an-address]
`)
	out, err := exec.Command(sentryBin, "check", "-config", bad).CombinedOutput()
	var ee *exec.ExitError
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("check exited %v, want status 1; output:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(bad) + `:(\d+): .+`)
	want := map[string]bool{"4": false, "7": false, "9": false}
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("line not in FILE:LINE: form: %q", l)
			continue
		}
		want[m[1]] = true
	}
	for line, seen := range want {
		if !seen {
			t.Errorf("no error reported for line %s; output:\n%s", line, out)
		}
	}
	if len(lines) != 3 {
		t.Errorf("want exactly 3 errors, got %d:\n%s", len(lines), out)
	}
}

func TestCheckExamples(t *testing.T) {
	files, _ := filepath.Glob("../deploy/examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example policies found")
	}
	for _, f := range files {
		out, err := exec.Command(sentryBin, "check", "-config", f).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	out, err := exec.Command(sentryBin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sentry ") {
		t.Errorf("version: %v %q", err, out)
	}
	out, _ = exec.Command(sentryBin, "-h").CombinedOutput()
	for _, w := range []string{"run -config", "check -config", "demo", "version", "-backend"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("help lacks %q", w)
		}
	}
}

// TestCheckDump: `sentry check -dump` prints every example as YAML with
// the defaults the file left out.
func TestCheckDump(t *testing.T) {
	files, _ := filepath.Glob("../deploy/examples/*.yaml")
	for _, f := range files {
		out, err := exec.Command(sentryBin, "check", "-config", f, "-dump").Output()
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var back map[string]any
		if err := yaml.Unmarshal(out, &back); err != nil {
			t.Errorf("%s: the dump is not YAML: %v", f, err)
			continue
		}
		for _, k := range []string{"admin", "log", "server", "apps", "listeners"} {
			if _, ok := back[k]; !ok {
				t.Errorf("%s: the dump lacks %s", f, k)
			}
		}
		if !strings.Contains(string(out), "read_header_timeout:") {
			t.Errorf("%s: the dump lacks the server defaults", f)
		}
	}
}
