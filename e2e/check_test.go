package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
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
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(bad) + `:(\d+):(\d+): .+`)
	// The unknown key at its key, the bad duration and the bad address at
	// their values.
	want := map[string]bool{"4:5": false, "7:16": false, "9:16": false}
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("line not in FILE:LINE:COLUMN: form: %q", l)
			continue
		}
		want[m[1]+":"+m[2]] = true
	}
	for at, seen := range want {
		if !seen {
			t.Errorf("no error reported at %s; output:\n%s", at, out)
		}
	}
	if len(lines) != 3 {
		t.Errorf("want exactly 3 errors, got %d:\n%s", len(lines), out)
	}
	if !strings.Contains(string(out), `unknown key "backendz" (did you mean "backends"?)`) {
		t.Errorf("no did-you-mean:\n%s", out)
	}
}

// TestCheckJSON: `sentry check -format json` reports the same errors as a
// JSON object, with file, line, column, message and the did-you-mean
// suggestion apart, and exits 1; a valid policy gives valid: true and 0.
func TestCheckJSON(t *testing.T) {
	bad := writeFile(t, "bad.yaml", `
apps:
  - name: web
    balanse: p2c
    backends: {static: [127.0.0.1:9000]}
    timeouts: {connect: 250}
`)
	cmd := exec.Command(sentryBin, "check", "-config", bad, "-format", "json")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("check exited %v, want status 1; output:\n%s", err, out)
	}
	type jerr struct {
		File       string `json:"file"`
		Line       int    `json:"line"`
		Column     int    `json:"column"`
		Message    string `json:"message"`
		DidYouMean string `json:"did_you_mean"`
	}
	var rep struct {
		File   string `json:"file"`
		Valid  *bool  `json:"valid"`
		Errors []jerr `json:"errors"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := []jerr{
		{bad, 3, 5, `apps[0]: unknown key "balanse" (did you mean "balance"?)`, "balance"},
		{bad, 5, 25, `apps[0].timeouts.connect: duration "250" has no unit; use a unit, e.g. 250ms or 250s`, ""},
	}
	if rep.File != bad || rep.Valid == nil || *rep.Valid || !reflect.DeepEqual(rep.Errors, want) {
		t.Errorf("report:\n%s\nwant errors %+v", out, want)
	}

	good := writeFile(t, "good.yaml", "apps: [{name: web, backends: {static: [127.0.0.1:9000]}}]\n")
	out, err = exec.Command(sentryBin, "check", "-config", good, "-format", "json").Output()
	if err != nil {
		t.Fatalf("check of a valid policy: %v\n%s", err, out)
	}
	rep.Valid, rep.Errors = nil, nil
	if err := json.Unmarshal(out, &rep); err != nil || rep.Valid == nil || !*rep.Valid || rep.Errors == nil || len(rep.Errors) != 0 {
		t.Errorf("report of a valid policy: %v\n%s", err, out)
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

// TestCheckDump: `sentry check -dump` prints every example as a valid
// policy with the defaults the file left out, and dump → check → dump
// gives the same bytes.
func TestCheckDump(t *testing.T) {
	files, _ := filepath.Glob("../deploy/examples/*.yaml")
	if len(files) < 5 {
		t.Fatalf("found %d examples", len(files))
	}
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
		for _, k := range []string{"admin", "log", "server", "apps"} {
			if _, ok := back[k]; !ok {
				t.Errorf("%s: the dump lacks %s", f, k)
			}
		}
		if !strings.Contains(string(out), "read_header_timeout:") {
			t.Errorf("%s: the dump lacks the server defaults", f)
		}
		again := writeFile(t, "dump.yaml", string(out))
		out2, err := exec.Command(sentryBin, "check", "-config", again, "-dump").CombinedOutput()
		if err != nil {
			t.Errorf("%s: the dump is not a valid policy: %v\n%s", f, err, out2)
			continue
		}
		if !bytes.Equal(out, out2) {
			t.Errorf("%s: dump → check → dump differs:\n%s\n---\n%s", f, out, out2)
		}
	}
}

// TestSchemaCommand: `sentry schema` prints the JSON Schema the
// repository keeps.
func TestSchemaCommand(t *testing.T) {
	out, err := exec.Command(sentryBin, "schema").Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../docs/policy.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		t.Error("`sentry schema` differs from docs/policy.schema.json")
	}
}
