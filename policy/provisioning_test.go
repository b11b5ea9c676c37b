package policy

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProvisioningDefaults(t *testing.T) {
	s := mustParse(t, `
apps:
  - name: a
    backends: {static: ["h:1"]}
    sla: {revenue: 0.3, targets: [{target: 1s}]}
`)
	want := Provisioning{Window: 5 * time.Minute, FDrop: 0.5, Spacing: 5 * time.Minute, MaxStep: 1, MinServers: 1, Revenue: 0.3, TProv: 30 * time.Minute}
	if got := s.Apps[0].Provisioning; got != want {
		t.Fatalf("provisioning = %+v, want %+v", got, want)
	}
	if s.Apps[0].Partition != (Partition{}) {
		t.Fatalf("partition = %+v, want none", s.Apps[0].Partition)
	}
}

func TestProvisioningSection(t *testing.T) {
	s := mustParse(t, `
apps:
  - name: a
    backends: {static: ["h:1"]}
    sla: {revenue: 0.3}
    provisioning:
      target: 200ms
      window: 1m
      f_drop: 0.25
      spacing: 2m
      max_step: 3
      min_servers: 2
      max_servers: 10
      revenue: 0
      t_prov: 10m
      webhook: {url: "http://scaler.local:8080/ask", timeout: 2s, retries: 0}
    partition: {index: 1, count: 3}
`)
	a := s.Apps[0]
	want := Provisioning{Target: 200 * time.Millisecond, Window: time.Minute, FDrop: 0.25, Spacing: 2 * time.Minute, MaxStep: 3,
		MinServers: 2, MaxServers: 10, Revenue: 0, TProv: 10 * time.Minute}
	wh := a.Provisioning.Webhook
	a.Provisioning.Webhook = nil
	if a.Provisioning != want {
		t.Fatalf("provisioning = %+v, want %+v", a.Provisioning, want)
	}
	if wh == nil || *wh != (Webhook{URL: "http://scaler.local:8080/ask", Timeout: 2 * time.Second, Retries: 0}) {
		t.Fatalf("webhook = %+v", wh)
	}
	if a.Partition != (Partition{Index: 1, Count: 3}) {
		t.Fatalf("partition = %+v", a.Partition)
	}
}

func TestProvisioningValidation(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"misspelt key", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    provisioning:
      fdrop: 0.3
`, []string{`5: apps[0].provisioning: unknown key "fdrop" (did you mean "f_drop"?)`}},
		{"ranges", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    provisioning:
      f_drop: 1
      max_step: 0
      window: 10ms
      t_prov: 0s
      revenue: -1
      target: -1s
`, []string{
			`5: apps[0].provisioning.f_drop: 1 is out of range`,
			`6: apps[0].provisioning.max_step: `,
			`7: apps[0].provisioning.window: 10ms is too short`,
			`8: apps[0].provisioning.t_prov: `,
			`9: apps[0].provisioning.revenue: -1 is out of range`,
			`10: apps[0].provisioning.target: -1s must not be negative`,
		}},
		{"ceiling below floor", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    provisioning:
      min_servers: 4
      max_servers: 3
`, []string{`6: apps[0].provisioning.max_servers: max_servers 3 is below min_servers 4`}},
		{"webhook", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    provisioning:
      webhook: {timeout: 1s}
  - name: b
    listen: ":9"
    backends: {static: ["h:1"]}
    provisioning:
      webhook: {url: "ftp://x/", retries: 11}
`, []string{
			`5: apps[0].provisioning.webhook: url is required`,
			`10: apps[1].provisioning.webhook.url: "ftp://x/" is not an http:// or https:// URL`,
			`10: apps[1].provisioning.webhook.retries: 11 is out of range`,
		}},
		{"partition", `
apps:
  - name: a
    backends: {static: ["h:1"]}
    partition: {index: 3, count: 3}
  - name: b
    listen: ":9"
    backends: {static: ["h:1"]}
    partition:
      index: 0
  - name: c
    listen: ":10"
    backends: {static: ["h:1"]}
    partition: {count: 2}
  - name: d
    listen: ":11"
    backends: {static: ["h:1"]}
    partition: {count: 2, index: 1, index_from_hostname: true}
`, []string{
			`4: apps[0].partition.index: 3 is out of range; must be below count 3`,
			`8: apps[1].partition: count is required`,
			`13: apps[2].partition: index is required`,
			`17: apps[3].partition.index_from_hostname: give index or index_from_hostname, not both`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(strings.TrimPrefix(tt.src, "\n")))
			matchErrors(t, asErrors(t, err), tt.want)
		})
	}
}

func TestPartitionFromHostname(t *testing.T) {
	src := []byte(`apps:
  - name: a
    backends: {static: ["h:1"]}
    partition: {count: 3, index_from_hostname: true}
`)
	host := func(h string, err error) func() (string, error) {
		return func() (string, error) { return h, err }
	}
	s, err := parseWith("t.yaml", src, nodeBudget, host("sentry-2.sentry.ns.svc.cluster.local", nil))
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Apps[0].Partition; p != (Partition{Index: 2, Count: 3, FromHostname: true}) {
		t.Fatalf("partition = %+v", p)
	}
	for _, c := range []struct {
		host string
		err  error
		want string
	}{
		{"sentry-3", nil, `4: apps[0].partition.index_from_hostname: host name "sentry-3" gives index 3, not below count 3`},
		{"sentry", nil, `4: apps[0].partition.index_from_hostname: host name "sentry" does not end in -N`},
		{"sentry-", nil, `4: apps[0].partition.index_from_hostname: host name "sentry-" does not end in -N`},
		{"sentry-x1", nil, `does not end in -N`},
		{"", errors.New("boom"), `4: apps[0].partition.index_from_hostname: cannot read the host name: boom`},
	} {
		_, err := parseWith("t.yaml", src, nodeBudget, host(c.host, c.err))
		want := c.want
		if !strings.HasPrefix(want, "4: ") {
			want = "4: " + want
		}
		matchErrors(t, asErrors(t, err), []string{want})
	}
	for h, want := range map[string]int{"web-0": 0, "a-b-17": 17, "x-5.example.com": 5} {
		if got, err := HostnameOrdinal(h); err != nil || got != want {
			t.Errorf("HostnameOrdinal(%q) = %d, %v; want %d", h, got, err, want)
		}
	}
	for _, h := range []string{"web-+1", "web-1a", "web", "web-"} {
		if _, err := HostnameOrdinal(h); err == nil {
			t.Errorf("HostnameOrdinal(%q) accepted", h)
		}
	}
}

// FuzzProvisioning: any provisioning and partition section (and any host
// name) either fails with line-numbered errors or yields settings within
// their documented ranges.
func FuzzProvisioning(f *testing.F) {
	for _, s := range []struct{ prov, part, host string }{
		{"{}", "{count: 1, index: 0}", "x-0"},
		{"{target: 1s, window: 1m, f_drop: 0.2, spacing: 1s, max_step: 2, min_servers: 0, max_servers: 9}", "{count: 4, index_from_hostname: true}", "sentry-3"},
		{"{webhook: {url: \"http://a/\", timeout: 1ms, retries: 10}, revenue: 1e9, t_prov: 1s}", "{count: 2, index: 1}", "h"},
		{"{min_servers: 5, max_servers: 4, f_drop: 1}", "{index: 9}", "sentry-99"},
		{"[1, 2]", "null", ""},
	} {
		f.Add(s.prov, s.part, s.host)
	}
	f.Fuzz(func(t *testing.T, prov, part, host string) {
		src := "apps:\n  - name: a\n    backends: {static: [\"h:1\"]}\n    provisioning: " + prov + "\n    partition: " + part + "\n"
		s, err := parseWith("t.yaml", []byte(src), nodeBudget, func() (string, error) { return host, nil })
		if err != nil {
			if s != nil {
				t.Fatal("snapshot returned with errors")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			return
		}
		p, pt := s.Apps[0].Provisioning, s.Apps[0].Partition
		if !(p.FDrop > 0 && p.FDrop < 1) || p.MaxStep < 1 || p.MinServers < 0 || p.MaxServers < 0 ||
			p.MaxServers > 0 && p.MaxServers < p.MinServers || p.Window < time.Second || p.Spacing <= 0 ||
			p.TProv < time.Second || p.Target < 0 || !(p.Revenue >= 0) {
			t.Fatalf("provisioning out of range: %+v", p)
		}
		if w := p.Webhook; w != nil && (w.URL == "" || w.Timeout < time.Millisecond || w.Retries < 0 || w.Retries > maxWebhookRetries) {
			t.Fatalf("webhook out of range: %+v", w)
		}
		if pt.Count < 0 || pt.Count > 1 && (pt.Index < 0 || pt.Index >= pt.Count) {
			t.Fatalf("partition out of range: %+v", pt)
		}
	})
}
