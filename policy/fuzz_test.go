package policy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics, and what it returns is coherent: either a
// snapshot that satisfies the invariants the proxy relies on, or a non-empty
// Errors sorted by line, never both.
func FuzzParse(f *testing.F) {
	for _, file := range exampleFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(docsExample(f))
	for _, s := range []string{
		"",
		"apps: [{name: a, backends: {static: [\"h:1\"]}}]",
		"apps:\n  - name: a\n    listen: 127.0.0.1:99999\n    balanse: p2c\n    timeouts: {connect: 250}\n    backends: {static: [\"h:1\"]}\n",
		"x-a: &a {backends: {static: [\"h:1\"]}}\napps: [{<<: *a, name: a}, {<<: *a, name: b, listen: \":9\"}]",
		"apps:\n  - &a\n    name: a\n    <<: *a\n",
		"apps: [{name: a, hosts: [A.com, \"[::1]:80\"], backends: {dns: {name: s, port: 1}}}]",
		"a: [\n",
		"apps: *x",
	} {
		f.Add([]byte(s))
	}
	// Parse as if the input were in deploy/examples, so the TLS examples
	// find their files.
	source := filepath.Join("..", "deploy", "examples", "fuzz.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(source, data)
		if err != nil {
			if s != nil {
				t.Fatal("snapshot returned with errors")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			for i, e := range es {
				if e.Msg == "" || e.File != source || e.Line < 0 {
					t.Fatalf("bad error %#v", e)
				}
				if i > 0 && es[i-1].Line > e.Line {
					t.Fatalf("errors not sorted:\n%v", err)
				}
			}
			return
		}
		checkInvariants(t, s)
	})
}

// checkInvariants checks what the rest of sentry assumes of a snapshot.
func checkInvariants(t *testing.T, s *Snapshot) {
	t.Helper()
	if len(s.Apps) == 0 || len(s.Listeners) == 0 {
		t.Fatalf("valid snapshot with %d apps, %d listeners", len(s.Apps), len(s.Listeners))
	}
	names := map[string]bool{}
	served := map[*App]bool{}
	for _, l := range s.Listeners {
		if len(l.Apps) == 0 {
			t.Fatalf("listener %s has no apps", l.Addr)
		}
		hosts := map[string]bool{}
		for _, a := range l.Apps {
			served[a] = true
			if !sameTLS(a.TLS, l.TLS) {
				t.Fatalf("listener %s: app %s TLS differs", l.Addr, a.Name)
			}
			for _, h := range a.Hosts {
				if hosts[h] {
					t.Fatalf("listener %s: host %s twice", l.Addr, h)
				}
				hosts[h] = true
			}
		}
		if l.Default != nil && len(l.Default.Hosts) != 0 {
			t.Fatalf("listener %s: default app %s has hosts", l.Addr, l.Default.Name)
		}
	}
	for i, a := range s.Apps {
		if a.Index != i || a.Name == "" || names[a.Name] || !served[a] {
			t.Fatalf("app %d %q: bad index, name or not served", i, a.Name)
		}
		names[a.Name] = true
		if (len(a.Backends.Static) == 0) == (a.Backends.DNS == nil) {
			t.Fatalf("app %s: want exactly one of static and dns", a.Name)
		}
		if a.Reject.Status != 503 && a.Reject.Status != 429 {
			t.Fatalf("app %s: reject status %d", a.Name, a.Reject.Status)
		}
		if a.Timeouts.Connect <= 0 || a.Timeouts.Response <= 0 || a.MaxConnsPerBackend < 1 {
			t.Fatalf("app %s: bad timeouts or limits", a.Name)
		}
	}
}
