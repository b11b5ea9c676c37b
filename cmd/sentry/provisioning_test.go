package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/sentry-proxy/sentry/control"
)

// TestProvisioningEndpoint: the admin listener serves /provisioning, one
// entry per app, and the provisioning metrics are registered.
func TestProvisioningEndpoint(t *testing.T) {
	be := backendServer(t, "one")
	l, a := freeAddr(t), freeAddr(t)
	pol := "admin: {listen: %s}\napps:\n  - name: web\n    listen: %s\n    backends: {static: [%s]}\n    provisioning: {min_servers: 2}\n"
	d := testDaemon(t, parse(t, fmt.Sprintf(pol, a, l, be)))
	resp, err := http.Get("http://" + a + "/provisioning?spare=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var adv control.ProvisioningAdvice
	if err := json.NewDecoder(resp.Body).Decode(&adv); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	if len(adv.Apps) != 1 || adv.Apps[0].App != "web" || adv.Spare != 1 {
		t.Fatalf("advice %+v", adv)
	}
	// Before the model has data, the floor.
	if v, ok := metric(t, d, "sentry_provision_servers_needed", map[string]string{"app": "web"}); !ok || v != 2 {
		t.Errorf("sentry_provision_servers_needed{app=web} = %v, %v; want 2 (min_servers)", v, ok)
	}
}
