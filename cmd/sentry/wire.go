package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/adminapi"
	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy"
)

// controlBuilder adapts a control.Manager to proxy.ControlBuilder. It lives
// here, in the wiring, so that package control does not import package
// proxy (a test in this package pins that).
type controlBuilder struct{ *control.Manager }

// Build implements proxy.ControlBuilder.
func (b controlBuilder) Build(ac *policy.App, pool *lb.Pool) (proxy.Controller, error) {
	app, err := b.Manager.Build(ac, pool)
	if err != nil {
		// A nil *control.App in a non-nil interface would pass a nil check.
		return nil, err
	}
	return app, nil
}

// The implementations are wired together here, so the guards are too.
var (
	_ proxy.ControlBuilder = controlBuilder{}
	_ proxy.Controller     = (*control.App)(nil)
	_ adminapi.Admission   = (*control.App)(nil)
)

// newControl builds the admission stacks' manager on the daemon's registry.
func newControl(log hclog.Logger, reg prometheus.Registerer) (controlBuilder, error) {
	m, err := control.NewManager(control.Options{Logger: log, Registerer: reg})
	return controlBuilder{Manager: m}, err
}

// newAdminAPI builds the runtime API on the proxy's pools and the
// admission stacks, with log as the root logger (its level is the one
// /runtime/log sets).
func newAdminAPI(log hclog.Logger, p *proxy.Proxy, m *control.Manager) *adminapi.API {
	return adminapi.New(adminapi.Options{
		Logger: log,
		Policy: p.Snapshot,
		Pool:   p.Pool,
		Admission: func(app string) adminapi.Admission {
			if a := m.App(app); a != nil {
				return a
			}
			return nil // not a nil *control.App in a non-nil interface
		},
	})
}
