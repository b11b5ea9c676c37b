package proxy

import (
	"runtime"
	"testing"

	"github.com/sentry-proxy/sentry/policy"
)

// TestEngineChoice: server.engine decides what a Proxy serves with --
// portable when asked, and otherwise (loops, or the key left out) the
// loops where the system has them -- and DefaultEngine, what `sentry
// version` prints, is what the key left out gives.
func TestEngineChoice(t *testing.T) {
	def := policy.EnginePortable
	if runtime.GOOS == "linux" {
		def = policy.EngineLoops
	}
	if got := DefaultEngine(); got != def {
		t.Errorf("DefaultEngine() = %q on %s, want %q", got, runtime.GOOS, def)
	}
	for _, c := range []struct{ key, want string }{
		{"", def},
		{policy.EngineLoops, def},
		{policy.EnginePortable, policy.EnginePortable},
	} {
		snap, err := policy.FromFlags("127.0.0.1:1", []string{"127.0.0.1:1"}, "off")
		if err != nil {
			t.Fatal(err)
		}
		snap.Server.Engine = c.key
		p, err := New(Options{}, snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Engine(); got != c.want {
			t.Errorf("server.engine %q: Engine() = %q, want %q", c.key, got, c.want)
		}
		if p.loops() != (c.want == policy.EngineLoops) {
			t.Errorf("server.engine %q: loops() = %v with Engine() %q", c.key, p.loops(), p.Engine())
		}
		p.Close()
	}
}
