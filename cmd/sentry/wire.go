package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sentry-proxy/sentry/control"
)

// newControl builds the admission stacks' manager on the daemon's registry.
func newControl(log hclog.Logger, reg prometheus.Registerer) (control.ProxyBuilder, error) {
	m, err := control.NewManager(control.Options{Logger: log, Registerer: reg})
	return control.ProxyBuilder{Manager: m}, err
}
