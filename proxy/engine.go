package proxy

import "strings"

// EngineName names the front-end engines this proxy serves with, as
// sentry_build_info's engine label and `sentry version` show them: the
// event loops in use joined with "+" -- "evloop" (plain HTTP/1.1),
// "tlsloop" (HTTP/1.1 over TLS 1.3), "h2loop" (h2 over TLS 1.3) -- or
// "fasthttp" when no loop serves (not Linux, Options.Engine is
// EngineFastHTTP, or SENTRY_EVLOOP=0 under EngineAuto); "+xnet" follows
// when x/net's h2 server replaces sentry's own. It is the one place that
// reads what decides the engine (Options.Engine, Options.H2, the
// platform and the diagnostic environment variables), so a policy key
// that chooses the engine changes what it says with no other edit.
//
// What a listener really got can still fall short of the name: a loop
// that fails to start, or a TLS record layer that fails its self-test,
// leaves that listener on the goroutine path and logs a warning.
func (p *Proxy) EngineName() string { return EngineName(p.opts.Engine, p.opts.H2) }

// EngineName is (*Proxy).EngineName for the given options, without a
// proxy (`sentry version` has none).
func EngineName(e Engine, h2 H2Server) string {
	own := h2 == H2Own || h2 == H2Auto && !h2XNetFromEnv()
	plain, tls, h2l := loopsInForce(e, own)
	var parts []string
	if plain {
		parts = append(parts, "evloop")
	}
	if tls {
		parts = append(parts, "tlsloop")
	}
	if h2l {
		parts = append(parts, "h2loop")
	}
	if len(parts) == 0 {
		parts = append(parts, "fasthttp")
	}
	if !own {
		parts = append(parts, "xnet")
	}
	return strings.Join(parts, "+")
}
