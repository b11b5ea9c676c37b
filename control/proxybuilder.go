package control

import (
	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/proxy"
)

// ProxyBuilder adapts a Manager to proxy.ControlBuilder.
type ProxyBuilder struct{ *Manager }

// Build implements proxy.ControlBuilder.
func (b ProxyBuilder) Build(ac *policy.App, pool *lb.Pool) (proxy.Controller, error) {
	return b.Manager.Build(ac, pool)
}

var (
	_ proxy.ControlBuilder = ProxyBuilder{}
	_ proxy.Controller     = (*App)(nil)
)
