package proxy

import "github.com/sentry-proxy/sentry/policy"

// engine.go: which engine serves the process's listeners (server.engine;
// doc.go, "Engines"). One value for every listener and protocol, read
// when the Proxy is made: the loops take listening sockets and adopted
// TLS connections at Serve, so a reload that changes the key applies to
// the next process (a restart or an upgrade), which is what the daemon's
// reload warns about.

// pickEngine is the engine that serves for the policy's server.engine:
// EnginePortable when asked, EngineLoops otherwise (the zero value is the
// default, loops) where the system has event loops (loopsAvailable), and
// EnginePortable, with a warning, where it has not.
func (p *Proxy) pickEngine(want string) string {
	if want == policy.EnginePortable {
		return policy.EnginePortable
	}
	if !loopsAvailable {
		p.log.Warn("server.engine loops: this system has no event loops (they need Linux); serving with the portable engine")
		return policy.EnginePortable
	}
	return policy.EngineLoops
}

// Engine is the engine serving this process's listeners: policy.EngineLoops
// or policy.EnginePortable (sentry_build_info's engine label). It does
// not change for the Proxy's life. A listener whose loops could not start
// (logged) is served by the portable paths all the same.
func (p *Proxy) Engine() string { return p.engine }

// loops reports whether the event loops serve (plain listeners, and
// HTTP/1.1 and h2 over TLS 1.3).
func (p *Proxy) loops() bool { return p.engine == policy.EngineLoops }

// DefaultEngine is the engine server.engine's default (loops) runs on
// this system: loops where there are event loops (Linux), portable
// elsewhere. `sentry version` names it, having no policy; a running
// process's is Engine (sentry_build_info's engine label).
func DefaultEngine() string {
	if loopsAvailable {
		return policy.EngineLoops
	}
	return policy.EnginePortable
}
