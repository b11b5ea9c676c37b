package conformance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// testsslChecks are the check groups run: protocols (-p), cipher
// categories (-s), forward secrecy (-f), the server's preferences (-P),
// its defaults and certificate (-S), HTTP headers (-h) and every
// vulnerability (-U). Left out for time, as they rate nothing the others
// do not: the client simulations (-c) and each cipher one by one (-e).
var testsslChecks = []string{"-p", "-s", "-f", "-P", "-S", "-h", "-U"}

// testsslBad are the severities a finding must not have.
var testsslBad = map[string]bool{"MEDIUM": true, "HIGH": true, "CRITICAL": true}

// TestTestssl runs testssl.sh against a TLS listener with the default TLS
// settings, offline (no DNS lookups, no fetching of CRLs or OCSP answers:
// those checks need the internet and are skipped) and with the test CA
// added to its trust store. No finding may be rated MEDIUM or worse; a
// FATAL (testssl.sh could not run a check) fails too. The run is bounded
// by testssl.sh's own connect and openssl timeouts and, in all, by 10
// minutes.
func TestTestssl(t *testing.T) {
	bin := tool(t, "", "apt-get install testssl.sh", "testssl", "testssl.sh")
	s := startSentry(t, frontTLSLoop, echoBackend(t), appOpts{})
	dir := t.TempDir()
	report := filepath.Join(dir, "testssl.json")
	args := append([]string{
		"--quiet", "--color", "0", "--warnings", "off", "--fast",
		"--nodns", "none", "--connect-timeout", "10", "--openssl-timeout", "10",
		"--add-ca", s.ca, "--jsonfile", report,
	}, testsslChecks...)
	args = append(args, s.addr)
	start := time.Now()
	stdout, stderr, err := run(t, 10*time.Minute, dir, bin, args...)
	t.Logf("testssl.sh ran %v (exit: %v)", time.Since(start).Round(time.Second), err)
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("testssl.sh wrote no report (%v; exit: %v)\nstdout:\n%s\nstderr:\n%s", rerr, err, tail(stdout, 4000), tail(stderr, 2000))
	}
	var findings []struct {
		ID       string `json:"id"`
		Severity string `json:"severity"`
		Finding  string `json:"finding"`
	}
	if err := json.Unmarshal(b, &findings); err != nil {
		t.Fatalf("testssl.sh report: %v\n%s", err, tail(string(b), 2000))
	}
	seen := map[string]bool{}
	var bad []string
	for _, f := range findings {
		seen[f.ID] = true
		if testsslBad[f.Severity] || f.Severity == "FATAL" {
			bad = append(bad, f.Severity+" "+f.ID+": "+f.Finding)
		}
	}
	// The scan reached the listener: the protocols, the certificate and
	// the headers were rated.
	for _, id := range []string{"TLS1_3", "TLS1_2", "cert_trust", "HSTS_time", "heartbleed"} {
		if !seen[id] {
			ids := make([]string, 0, len(seen))
			for id := range seen {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			t.Errorf("testssl.sh's report has no %q finding (it has %s): the scan did not run whole\nstdout:\n%s", id, strings.Join(ids, " "), tail(stdout, 4000))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("testssl.sh rated %d finding(s) MEDIUM or worse:\n%s\nstdout:\n%s", len(bad), strings.Join(bad, "\n"), tail(stdout, 6000))
	}
}
