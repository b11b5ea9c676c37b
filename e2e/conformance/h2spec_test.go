package conformance

import (
	"debug/buildinfo"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const h2specInstall = "(cd .ci/tools && go build -o /usr/local/bin/h2spec github.com/summerwind/h2spec/cmd/h2spec), or set SENTRY_H2SPEC to its path"

// h2specRuns is how many consecutive h2spec runs each front end must
// pass: SENTRY_H2SPEC_RUNS, 3 by default (what CI runs; the target, 10
// in a row, is SENTRY_H2SPEC_RUNS=10).
func h2specRuns(t *testing.T) int {
	v := os.Getenv("SENTRY_H2SPEC_RUNS")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("SENTRY_H2SPEC_RUNS=%q: want a count from 1 to 1000", v)
	}
	return n
}

// TestH2Spec runs h2spec in strict mode (-S: every case, the SHOULDs
// too) against each front end -- h2 over TLS on the event loops and on
// the goroutine driver, and h2c -- h2specRuns times in a row. Every case
// must pass in every run.
func TestH2Spec(t *testing.T) {
	bin := tool(t, "SENTRY_H2SPEC", h2specInstall, "h2spec")
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		t.Logf("h2spec: %s %s", bi.Main.Path, bi.Main.Version)
	}
	runs := h2specRuns(t)
	be := echoBackend(t)
	for _, f := range fronts {
		t.Run(f.String(), func(t *testing.T) {
			s := startSentry(t, f, be, appOpts{})
			s.checkDriver(t)
			failedIn := map[string][]int{}
			firstMsg := map[string]string{}
			counts := map[int]bool{}
			for i := 1; i <= runs; i++ {
				cases := runH2Spec(t, bin, s, i)
				counts[len(cases)] = true
				for _, c := range cases {
					if c.failure == "" {
						continue
					}
					failedIn[c.id] = append(failedIn[c.id], i)
					if firstMsg[c.id] == "" {
						firstMsg[c.id] = c.failure
					}
				}
			}
			if len(counts) != 1 {
				t.Errorf("h2spec ran a different number of cases from run to run: %v", counts)
			}
			ids := make([]string, 0, len(failedIn))
			for id := range failedIn {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				t.Errorf("h2spec %s failed in run(s) %v of %d:\n%s", id, failedIn[id], runs, indent(firstMsg[id]))
			}
		})
	}
}

// h2specCase is one case's outcome in one run.
type h2specCase struct {
	id      string // package and description, e.g. "http2/4.2 Sends a DATA frame with 2^14 octets in length"
	failure string // "" when it passed
}

// runH2Spec runs h2spec once in strict mode against s and returns every
// case from its JUnit report.
func runH2Spec(t *testing.T, bin string, s *sentry, i int) []h2specCase {
	t.Helper()
	report := filepath.Join(t.TempDir(), fmt.Sprintf("h2spec-%d.xml", i))
	// -o: the seconds h2spec waits for an expected frame. Passing cases
	// take milliseconds; 5 keeps a loaded CI machine from turning a slow
	// answer into a failure, and bounds a run with hung cases.
	args := []string{"-S", "-h", "127.0.0.1", "-p", s.port(), "-o", "5", "-j", report}
	if s.f.tls() {
		args = append(args, "-t", "-k")
	}
	stdout, stderr, err := run(t, 5*time.Minute, "", bin, args...)
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("h2spec run %d wrote no report (%v; exit: %v)\nstdout:\n%s\nstderr:\n%s", i, rerr, err, tail(stdout, 4000), stderr)
	}
	var rep struct {
		Suites []struct {
			Cases []struct {
				Package   string `xml:"package,attr"`
				Classname string `xml:"classname,attr"`
				Failure   *struct {
					Text string `xml:",chardata"`
				} `xml:"failure"`
				Error *struct {
					Text string `xml:",chardata"`
				} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &rep); err != nil {
		t.Fatalf("h2spec run %d: report: %v", i, err)
	}
	var out []h2specCase
	for _, su := range rep.Suites {
		for _, c := range su.Cases {
			hc := h2specCase{id: c.Package + " " + c.Classname}
			switch {
			case c.Failure != nil:
				hc.failure = "failure: " + strings.TrimSpace(c.Failure.Text)
			case c.Error != nil:
				hc.failure = "error: " + strings.TrimSpace(c.Error.Text)
			case c.Skipped != nil:
				hc.failure = "skipped"
			}
			out = append(out, hc)
		}
	}
	if len(out) == 0 {
		t.Fatalf("h2spec run %d reported no cases (exit: %v)\nstdout:\n%s\nstderr:\n%s", i, err, tail(stdout, 4000), stderr)
	}
	return out
}

func indent(s string) string {
	return "\t" + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n\t")
}
