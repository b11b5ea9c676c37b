package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sentry-proxy/sentry/policy"
)

// The kit against its README: what deploy/README.md tells an operator
// must be what the files do.

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEListsTheKit: every path in the README's table exists, and
// every manifest, rule file and example of the kit is in the table.
func TestREADMEListsTheKit(t *testing.T) {
	doc := readme(t)
	table, _, _ := strings.Cut(doc, "\n\n`go test")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("\\| \\[`([^`]+)`\\]").FindAllStringSubmatch(table, -1) {
		listed[m[1]] = true
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("README lists %s: %v", m[1], err)
		}
	}
	var files []string
	for _, g := range []string{"kubernetes/*.yaml", "prometheus/*.yaml", "systemd/*.service", "grafana/*.json", "Dockerfile"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found %d files", len(files))
	}
	for _, f := range files {
		if !listed[f] {
			t.Errorf("README's table does not list %s", f)
		}
	}
}

// sentryContainers returns every workload's sentry container, by
// "file/kind/name", with its pod's labels.
func sentryContainers(t *testing.T) (map[string]corev1.Container, map[string]map[string]string) {
	t.Helper()
	cs, labels := map[string]corev1.Container{}, map[string]map[string]string{}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		for _, o := range decodeStrict(t, f) {
			var pod corev1.PodTemplateSpec
			var key string
			switch w := o.(type) {
			case *appsv1.Deployment:
				pod, key = w.Spec.Template, f+"/Deployment/"+w.Name
			case *appsv1.StatefulSet:
				pod, key = w.Spec.Template, f+"/StatefulSet/"+w.Name
			default:
				continue
			}
			for _, c := range pod.Spec.Containers {
				if c.Name == "sentry" {
					cs[key] = c
					labels[key] = pod.Labels
				}
			}
		}
	}
	if len(cs) < 2 {
		t.Fatalf("found %d sentry containers", len(cs))
	}
	return cs, labels
}

// TestREADMEResources: the README asks for a CPU limit and GOMEMLIMIT at
// about N% of the memory limit; every sentry container sets both, within
// five points of N.
func TestREADMEResources(t *testing.T) {
	doc := readme(t)
	m := regexp.MustCompile("Set `GOMEMLIMIT` to about (\\d+)% of the container's memory\\s+limit").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("README no longer says what GOMEMLIMIT should be")
	}
	share, _ := strconv.ParseFloat(m[1], 64)
	if !strings.Contains(doc, "give it a\n  limit") && !strings.Contains(doc, "give it a limit") {
		t.Fatal("README no longer asks for a CPU limit")
	}
	cs, _ := sentryContainers(t)
	for key, c := range cs {
		cpu, mem := c.Resources.Limits[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceMemory]
		if cpu.IsZero() {
			t.Errorf("%s: no CPU limit (README: GOMAXPROCS would be the node's core count)", key)
		}
		if mem.IsZero() {
			t.Errorf("%s: no memory limit", key)
			continue
		}
		var gml string
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				gml = e.Value
			}
		}
		limit, err := goMemLimit(gml)
		if err != nil {
			t.Errorf("%s: GOMEMLIMIT %q: %v", key, gml, err)
			continue
		}
		got := 100 * float64(limit) / float64(mem.Value())
		if got < share-5 || got > share+5 {
			t.Errorf("%s: GOMEMLIMIT %s is %.1f%% of limits.memory %s; README says about %v%%", key, gml, got, mem.String(), share)
		}
	}
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does: a number
// of bytes with an optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimit(s string) (int64, error) {
	m := regexp.MustCompile(`^(\d+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("not a GOMEMLIMIT value")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, err
}

// TestREADMEAdminPortPolicy: as the README says, a NetworkPolicy selects
// every sentry pod, lets the proxy port in, and lets the admin port in
// only from the selected (Prometheus) peers.
func TestREADMEAdminPortPolicy(t *testing.T) {
	if !strings.Contains(readme(t), "NetworkPolicy") {
		t.Fatal("README says nothing of the NetworkPolicy")
	}
	cs, labels := sentryContainers(t)
	var policies []*networkingv1.NetworkPolicy
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		policies = append(policies, only[*networkingv1.NetworkPolicy](t, decodeStrict(t, f))...)
	}
	for key, c := range cs {
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		isPort := func(p *intstr.IntOrString, name string) bool {
			return p != nil && (p.String() == name || p.IntValue() == int(ports[name]))
		}
		selected := false
		for _, np := range policies {
			if !selects(np.Spec.PodSelector.MatchLabels, labels[key]) {
				continue
			}
			selected = true
			httpOpen, adminFrom := false, 0
			for _, r := range np.Spec.Ingress {
				for _, p := range r.Ports {
					switch {
					case isPort(p.Port, "http") && len(r.From) == 0:
						httpOpen = true
					case isPort(p.Port, "admin") && len(r.From) == 0:
						t.Errorf("%s: NetworkPolicy %s lets anyone reach the admin port", key, np.Name)
					case isPort(p.Port, "admin"):
						adminFrom++
					}
				}
				if len(r.Ports) == 0 && len(r.From) == 0 {
					t.Errorf("%s: NetworkPolicy %s lets anything in on every port", key, np.Name)
				}
			}
			if !httpOpen || adminFrom == 0 {
				t.Errorf("%s: NetworkPolicy %s: proxy port open %v, admin port rules %d", key, np.Name, httpOpen, adminFrom)
			}
		}
		if !selected {
			t.Errorf("%s: no NetworkPolicy selects its pods", key)
		}
	}
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return true
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestREADMEAlerts: the alerts the README's table names are exactly the
// rules', and each rule's runbook_url points to a heading that exists in
// docs/operations.md.
func TestREADMEAlerts(t *testing.T) {
	doc := readme(t)
	_, section, _ := strings.Cut(doc, "\n## Alerts\n")
	section, _, _ = strings.Cut(section, "\n## ")
	var named []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(Sentry[A-Za-z]+)` \\|").FindAllStringSubmatch(section, -1) {
		named = append(named, m[1])
	}
	rules := only[*monitoringv1.PrometheusRule](t, decodeStrict(t, "kubernetes/monitoring.yaml"))
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(ops), -1) {
		anchors[slug(m[1])] = true
	}
	var have []string
	for _, g := range rules[0].Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			have = append(have, r.Alert)
			u := r.Annotations["runbook_url"]
			base, anchor, ok := strings.Cut(u, "#")
			if !ok || !strings.HasSuffix(base, "/docs/operations.md") || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a heading of docs/operations.md", r.Alert, u)
			}
		}
	}
	sort.Strings(named)
	sort.Strings(have)
	if strings.Join(named, " ") != strings.Join(have, " ") || len(have) == 0 {
		t.Errorf("README's alerts %v, the rules' %v", named, have)
	}
	for _, want := range []string{"absent(up", "sentry_proxy_errors_total"} {
		found := false
		for _, g := range rules[0].Spec.Groups {
			for _, r := range g.Rules {
				found = found || strings.Contains(r.Expr.String(), want)
			}
		}
		if !found {
			t.Errorf("no alert on %s", want)
		}
	}
}

// slug is a Markdown heading's anchor as GitHub makes it.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		case r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestREADMEKubernetesNumbers: the drain numbers the README quotes (the
// preStop pause, shutdown_timeout, terminationGracePeriodSeconds) are the
// manifest's.
func TestREADMEKubernetesNumbers(t *testing.T) {
	doc := readme(t)
	num := func(re string) int {
		m := regexp.MustCompile(re).FindStringSubmatch(doc)
		if m == nil {
			t.Fatalf("README no longer matches %s", re)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	pause := num("a (\\d+) s `preStop` pause")
	drain := num("`server.shutdown_timeout` \\((\\d+) s\\)")
	grace := num("`terminationGracePeriodSeconds` \\((\\d+) s\\)")
	objs := decodeStrict(t, "kubernetes/sentry.yaml")
	dep := only[*appsv1.Deployment](t, objs)[0]
	c := dep.Spec.Template.Spec.Containers[0]
	if got := int(c.Lifecycle.PreStop.Sleep.Seconds); got != pause {
		t.Errorf("preStop %d s, README says %d s", got, pause)
	}
	if got := int(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds); got != grace {
		t.Errorf("terminationGracePeriodSeconds %d, README says %d s", got, grace)
	}
	cm := only[*corev1.ConfigMap](t, objs)[0]
	snap, err := policy.Parse("ConfigMap", []byte(cm.Data["sentry.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if got := int(snap.Server.ShutdownTimeout.Seconds()); got != drain {
		t.Errorf("shutdown_timeout %d s, README says %d s", got, drain)
	}
}
