package load

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestClassSource: a class with a source sends from that address (on
// Linux every address of 127.0.0.0/8 is local); a class without one from
// the system's choice. A source that is not an IP address is an error.
func TestClassSource(t *testing.T) {
	var mu sync.Mutex
	from := map[string]map[string]int{} // class header → remote IP → requests
	srv := fastServer(t, func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		k := r.Header.Get("X-Who")
		if from[k] == nil {
			from[k] = map[string]int{}
		}
		from[k][host]++
		mu.Unlock()
	})
	class := func(name, src string) Class {
		return Class{Name: name, Source: src, Request: Request{Headers: map[string]string{"X-Who": name}},
			Open: &Open{Arrivals: Uniform, Rate: Constant(50, time.Second)}}
	}
	_, s := run(t, Config{Targets: []string{srv.URL}, Classes: []Class{class("a", "127.0.0.2"), class("b", "127.0.0.3"), class("c", "")}})
	for _, k := range []string{"a", "b", "c"} {
		if c, _ := s.Class(k); c.Errors != 0 || c.Completed != 50 {
			t.Fatalf("class %s: %+v", k, c)
		}
	}
	want := map[string]string{"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.1"}
	for k, ip := range want {
		if len(from[k]) != 1 || from[k][ip] != 50 {
			t.Errorf("class %s sent from %v, want 50 from %s", k, from[k], ip)
		}
	}
	if _, err := (Config{Targets: []string{srv.URL}, Classes: []Class{class("a", "localhost")}}).Normalize(); err == nil {
		t.Error("source localhost: no error")
	}
}
