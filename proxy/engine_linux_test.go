package proxy

import (
	"testing"

	"github.com/sentry-proxy/sentry/policy"
)

// TestEngineName: the name follows every switch that decides the engine,
// and a running proxy reports its own options.
func TestEngineName(t *testing.T) {
	saved := [3]bool{fastDisabled, tlsLoopDisabled, h2LoopDisabled}
	defer func() { fastDisabled, tlsLoopDisabled, h2LoopDisabled = saved[0], saved[1], saved[2] }()
	t.Setenv("SENTRY_H2_SERVER", "")
	for _, c := range []struct {
		e            Engine
		h2           H2Server
		ev, tls, h2l bool // the environment's switches: true = turned off
		want         string
	}{
		{EngineAuto, H2Auto, false, false, false, "evloop+tlsloop+h2loop"},
		{EngineAuto, H2Auto, true, false, false, "fasthttp"},
		{EngineAuto, H2Auto, false, true, false, "evloop"},
		{EngineAuto, H2Auto, false, false, true, "evloop+tlsloop"},
		{EngineAuto, H2XNet, false, false, false, "evloop+tlsloop+xnet"},
		{EngineLoops, H2Own, true, true, false, "evloop+tlsloop+h2loop"},
		{EngineFastHTTP, H2Own, false, false, false, "fasthttp"},
		{EngineFastHTTP, H2XNet, false, false, false, "fasthttp+xnet"},
	} {
		fastDisabled, tlsLoopDisabled, h2LoopDisabled = c.ev, c.tls, c.h2l
		if got := EngineName(c.e, c.h2); got != c.want {
			t.Errorf("EngineName(%v, %v) with evloop off %v, tlsloop off %v, h2loop off %v = %q, want %q",
				c.e, c.h2, c.ev, c.tls, c.h2l, got, c.want)
		}
	}
	fastDisabled, tlsLoopDisabled, h2LoopDisabled = false, false, false
	t.Setenv("SENTRY_H2_SERVER", "xnet")
	if got := EngineName(EngineAuto, H2Auto); got != "evloop+tlsloop+xnet" {
		t.Errorf("SENTRY_H2_SERVER=xnet: %q", got)
	}
	snap, err := policy.FromFlags("127.0.0.1:1", []string{"127.0.0.1:1"}, "off")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Engine: EngineFastHTTP}, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.EngineName(); got != "fasthttp+xnet" {
		t.Errorf("proxy with EngineFastHTTP under SENTRY_H2_SERVER=xnet: %q", got)
	}
}
