package main

import (
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/proxy"
)

// TestControlBuilder checks the adapter between control and proxy: a
// rebuild returns the same app (learned state is kept), and a failed build
// returns a nil Controller, not a nil *control.App inside a non-nil
// interface.
func TestControlBuilder(t *testing.T) {
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
	b, err := newControl(log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	var pb proxy.ControlBuilder = b

	snap := parse(t, "apps:\n  - name: shop\n    backends: {static: [\"127.0.0.1:1\"]}\n")
	ac := snap.Apps[0]
	pool := lb.NewPool(lb.Options{App: ac.Name}, ac.Backends.Static)
	t.Cleanup(pool.Close)

	first, err := pb.Build(ac, pool)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if _, ok := first.(*control.App); !ok || first == nil {
		t.Fatalf("Build returned %T %v, want a non-nil *control.App", first, first)
	}
	again, err := pb.Build(ac, pool)
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if again != first {
		t.Errorf("rebuild returned a new app; learned state would be lost")
	}

	bad := *ac
	bad.Admission.Mode = "sometimes"
	got, err := pb.Build(&bad, pool)
	if err == nil {
		t.Fatalf("Build with mode %q succeeded", bad.Admission.Mode)
	}
	if got != nil {
		t.Errorf("failed Build returned non-nil Controller %#v", got)
	}
}
