package learned

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/lb"
)

func sample() *Document {
	d := New(time.Unix(1_700_000_000, 0), Origin{PID: 42, Version: "v1", Commit: "abc"})
	d.Apps = []App{{Name: "shop", Admission: control.AppState{Parallelism: 7.5},
		Backends: []lb.Health{{Addr: "10.0.0.1:80", Down: true}}}}
	return d
}

// TestDecodeValidates: a document is taken whole or not at all: another
// format or version, an unknown field, an app twice or without a name,
// or trailing data refuse it.
func TestDecodeValidates(t *testing.T) {
	var b strings.Builder
	if err := Encode(&b, sample()); err != nil {
		t.Fatal(err)
	}
	good := b.String()
	if d, err := Decode([]byte(good)); err != nil || d.Apps[0].Admission.Parallelism != 7.5 || !d.Apps[0].Backends[0].Down {
		t.Fatalf("round trip: %v %+v", err, d)
	}
	for _, c := range []struct{ name, doc, want string }{
		{"format", strings.Replace(good, Format, "other", 1), `format "other"`},
		{"version", strings.Replace(good, `"version":1`, `"version":2`, 1), "version 2; this sentry reads version 1"},
		{"unknown field", strings.Replace(good, `"pid":42`, `"pid":42,"colour":"red"`, 1), `unknown field "colour"`},
		{"app twice", strings.Replace(good, `"apps":[{`, `"apps":[{"name":"shop"},{`, 1), `app "shop" twice`},
		{"no name", strings.Replace(good, `"name":"shop"`, `"name":""`, 1), "an app without a name"},
		{"trailing", good + "{}", "data after the document"},
		{"not JSON", "sentry", "invalid character"},
	} {
		if _, err := Decode([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestStateFile: WriteFile replaces the file atomically (no temporary
// file left behind, mode 0600) and ReadFile reads it back; a missing
// file is os.ErrNotExist, a bad one an error naming it.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if _, err := ReadFile(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	for range 2 {
		if err := WriteFile(path, sample()); err != nil {
			t.Fatal(err)
		}
	}
	d, err := ReadFile(path)
	if err != nil || d.By.PID != 42 {
		t.Fatalf("read back: %v %+v", err, d)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left: %v", entries)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	os.WriteFile(path, []byte(`{"format":"sentry-learned-state","version":9}`), 0o600)
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file: %v", err)
	}
}

// TestHandover: the new process asks and gets the document taken at that
// moment; then each process follows the other's in-flight counts until
// the old one closes (a last report of zero, then the end: nil).
func TestHandover(t *testing.T) {
	old, nw := net.Pipe()
	var took atomic.Int32
	var inflight atomic.Int64
	inflight.Store(5)
	var peerMu sync.Mutex
	var fromNew []map[string]int64
	g := NewGiver(old, func() *Document { took.Add(1); return sample() },
		func() map[string]int64 { return map[string]int64{"shop": inflight.Load()} },
		func(m map[string]int64) { peerMu.Lock(); fromNew = append(fromNew, m); peerMu.Unlock() }, time.Millisecond)
	if took.Load() != 0 {
		t.Fatal("the document was taken before it was asked for")
	}
	tk, d, err := Request(nw, time.Second)
	if err != nil || d.By.PID != 42 || took.Load() != 1 {
		t.Fatalf("request: %v %+v (taken %d times)", err, d, took.Load())
	}
	var mu sync.Mutex
	var seen []map[string]int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk.Follow(make(chan struct{}), func() map[string]int64 { return map[string]int64{"shop": 3} }, func(m map[string]int64) {
			mu.Lock()
			seen = append(seen, m)
			mu.Unlock()
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		peerMu.Lock()
		n := len(fromNew)
		peerMu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	inflight.Store(2)
	g.Close()
	<-done
	peerMu.Lock()
	if len(fromNew) < 2 || fromNew[0]["shop"] != 3 || fromNew[len(fromNew)-1] != nil {
		t.Errorf("the new process's reports as the old one saw them: %v (want 3s, then nil at the end)", fromNew)
	}
	peerMu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 3 || seen[0]["shop"] != 5 {
		t.Fatalf("reports %v", seen)
	}
	if last, zero := seen[len(seen)-1], seen[len(seen)-2]; last != nil || zero == nil || zero["shop"] != 0 {
		t.Errorf("the end: %v then %v, want a report of 0 then nil", zero, last)
	}
}

// TestHandoverFailure: a new process that fails before it is ready tells
// the old one why.
func TestHandoverFailure(t *testing.T) {
	old, nw := net.Pipe()
	g := NewGiver(old, sample, func() map[string]int64 { return nil }, nil, 0)
	tk, _, err := Request(nw, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tk.Fail("policy.yaml:3:5: unknown key \"bogus\"")
	if got := g.Failure(time.Second); got != `policy.yaml:3:5: unknown key "bogus"` {
		t.Errorf("failure %q", got)
	}
}

// TestRequestTimeout: an old process that never answers (an older sentry
// does not know the file) costs the new one at most the timeout.
func TestRequestTimeout(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() { buf := make([]byte, 1024); a.Read(buf) }() // reads the request, answers nothing
	start := time.Now()
	if _, _, err := Request(b, 50*time.Millisecond); err == nil {
		t.Fatal("no error")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v", took)
	}
}
