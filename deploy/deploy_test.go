// Package deploy holds what an operator installs: a systemd unit, a
// Dockerfile, Kubernetes manifests, a Grafana dashboard and example
// policies. Its tests check them statically: the example policies and the
// ConfigMap's policy validate, the manifests and the dashboard parse and
// agree with the policy and with sentry's metrics, and the systemd unit
// passes systemd-analyze verify where that tool exists.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sentry-proxy/sentry/policy"
)

func TestExamplePoliciesValidate(t *testing.T) {
	files, _ := filepath.Glob("examples/*.yaml")
	if len(files) < 5 {
		t.Fatalf("found %d example policies", len(files))
	}
	for _, f := range files {
		if _, err := policy.Load(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// k8sObject is the part of a manifest the tests look at.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec yaml.Node         `yaml:"spec"`
}

type deploymentSpec struct {
	Template struct {
		Metadata struct {
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
			Containers                    []struct {
				Args  []string `yaml:"args"`
				Ports []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
				ReadinessProbe struct {
					HTTPGet struct {
						Path string `yaml:"path"`
						Port string `yaml:"port"`
					} `yaml:"httpGet"`
				} `yaml:"readinessProbe"`
				Lifecycle struct {
					PreStop struct {
						Sleep struct {
							Seconds int `yaml:"seconds"`
						} `yaml:"sleep"`
					} `yaml:"preStop"`
				} `yaml:"lifecycle"`
				VolumeMounts []struct {
					MountPath string `yaml:"mountPath"`
					SubPath   string `yaml:"subPath"`
				} `yaml:"volumeMounts"`
				SecurityContext struct {
					ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
					AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
				} `yaml:"securityContext"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type serviceSpec struct {
	ClusterIP string `yaml:"clusterIP"`
	Ports     []struct {
		Port int `yaml:"port"`
	} `yaml:"ports"`
}

func TestKubernetesManifests(t *testing.T) {
	data, err := os.ReadFile("kubernetes/sentry.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(false)
	var objs []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("document %d: %v", len(objs)+1, err)
		}
		if o.Kind == "" || o.APIVersion == "" || o.Metadata.Name == "" {
			t.Fatalf("document %d lacks kind, apiVersion or name", len(objs)+1)
		}
		objs = append(objs, o)
	}
	kinds := map[string][]k8sObject{}
	for _, o := range objs {
		kinds[o.Kind] = append(kinds[o.Kind], o)
	}
	for kind, n := range map[string]int{"Namespace": 1, "ConfigMap": 1, "Deployment": 1, "Service": 2, "PodDisruptionBudget": 1, "NetworkPolicy": 1} {
		if len(kinds[kind]) != n {
			t.Errorf("%d %s objects, want %d", len(kinds[kind]), kind, n)
		}
	}
	if t.Failed() {
		return
	}

	// The ConfigMap's policy validates.
	cm := kinds["ConfigMap"][0]
	src, ok := cm.Data["sentry.yaml"]
	if !ok {
		t.Fatalf("ConfigMap has no sentry.yaml")
	}
	snap, err := policy.Parse("ConfigMap sentry-policy", []byte(src))
	if err != nil {
		t.Fatalf("the ConfigMap's policy: %v", err)
	}

	// The Deployment runs that policy, on the ports it listens on.
	var dep deploymentSpec
	if err := kinds["Deployment"][0].Spec.Decode(&dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	args := strings.Join(c.Args, " ")
	m := regexp.MustCompile(`-config (\S+)`).FindStringSubmatch(args)
	if m == nil || !strings.Contains(args, "-watch") {
		t.Fatalf("container args %q: want -config FILE and -watch", args)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == filepath.Dir(m[1]) && vm.SubPath == "" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("%s is not in a directory-mounted volume (a subPath mount never sees ConfigMap updates)", m[1])
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	port := func(addr string) int {
		i := strings.LastIndexByte(addr, ':')
		n, _ := strconv.Atoi(addr[i+1:])
		return n
	}
	if len(snap.Listeners) != 1 || ports["http"] != port(snap.Listeners[0].Addr) {
		t.Errorf("container port http=%d, policy listens on %v", ports["http"], snap.Listeners[0].Addr)
	}
	if ports["admin"] != port(snap.Admin.Listen) {
		t.Errorf("container port admin=%d, policy admin on %s", ports["admin"], snap.Admin.Listen)
	}
	if strings.HasPrefix(snap.Admin.Listen, "127.") || strings.HasPrefix(snap.Listeners[0].Addr, "127.") {
		t.Errorf("a pod's listeners must not bind loopback")
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port != "admin" {
		t.Errorf("readiness probe %+v", c.ReadinessProbe.HTTPGet)
	}
	ann := dep.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(ports["admin"]) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v", ann)
	}
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	pause := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if grace <= pause+snap.Server.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %v <= preStop %v + shutdown_timeout %v: the drain would be killed", grace, pause, snap.Server.ShutdownTimeout)
	}
	if !c.SecurityContext.ReadOnlyRootFilesystem || c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v", c.SecurityContext)
	}

	// The backends are followed through a headless Service.
	a := snap.Apps[0]
	if a.Backends.DNS == nil {
		t.Fatalf("the ConfigMap's app has no DNS backends")
	}
	headless := false
	for _, s := range kinds["Service"] {
		var spec serviceSpec
		if err := s.Spec.Decode(&spec); err != nil {
			t.Fatal(err)
		}
		if spec.ClusterIP != "None" {
			continue
		}
		headless = true
		want := s.Metadata.Name + "." + s.Metadata.Namespace + ".svc.cluster.local"
		if a.Backends.DNS.Name != want {
			t.Errorf("policy resolves %s, headless Service is %s", a.Backends.DNS.Name, want)
		}
		if len(spec.Ports) == 0 || spec.Ports[0].Port != int(a.Backends.DNS.Port) {
			t.Errorf("headless Service ports %+v, policy port %d", spec.Ports, a.Backends.DNS.Port)
		}
	}
	if !headless {
		t.Errorf("no headless Service (clusterIP: None) for the backends")
	}
}

// docMetrics returns the metric names in docs/metrics.md's tables.
func docMetrics(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile("^\\| `(sentry_[a-z0-9_]+)`")
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = true
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d metrics in docs/metrics.md", len(out))
	}
	return out
}

func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/sentry-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Type    string   `json:"type"`
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		GridPos struct{ H, W, X, Y int }
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Schema     int     `json:"schemaVersion"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.Schema == 0 {
		t.Errorf("dashboard lacks title, uid or schemaVersion")
	}
	known := docMetrics(t)
	metricRE := regexp.MustCompile(`\bsentry_[a-z0-9_]+`)
	ids := map[int]bool{}
	var titles []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W == 0 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		titles = append(titles, strings.ToLower(p.Title))
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
				t.Errorf("panel %q: unbalanced parentheses in %s", p.Title, tg.Expr)
			}
			for _, name := range metricRE.FindAllString(tg.Expr, -1) {
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suf)
				}
				if !known[base] {
					t.Errorf("panel %q uses %s, which is not in docs/metrics.md", p.Title, name)
				}
			}
		}
	}
	all := strings.Join(titles, "\n")
	for _, want := range []string{"request rate by status", "latency", "admission decisions", "in flight", "healthy", "reload"} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel about %q", want)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "app", "instance"} {
		if !vars[v] {
			t.Errorf("no $%s variable", v)
		}
	}
}

func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile("systemd/sentry.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{
		"PIDFile=/run/sentry/sentry.pid", "-pidfile /run/sentry/sentry.pid",
		"ExecReload=/usr/local/bin/sentry reload -config /etc/sentry/sentry.yaml -pidfile /run/sentry/sentry.pid",
		"Type=notify", "NotifyAccess=all",
		"SIGUSR2", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
		"CapabilityBoundingSet=CAP_NET_BIND_SERVICE", "AmbientCapabilities=CAP_NET_BIND_SERVICE",
		"DynamicUser=yes", "RuntimeDirectory=sentry", "RestrictAddressFamilies=",
		"LogsDirectory=sentry", "StateDirectory=sentry", "-state-file /var/lib/sentry/state.json",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: static checks only")
	}
	// verify wants the binary to exist: point the unit at a stand-in.
	dir := t.TempDir()
	bin := filepath.Join(dir, "sentry")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sentry.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/sentry", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestLogrotate: the logrotate file rotates the path the unit makes
// writable and signals SIGUSR1 (which reopens the access log), never
// copytruncate.
func TestLogrotate(t *testing.T) {
	data, err := os.ReadFile("systemd/sentry.logrotate")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"/var/log/sentry/access.log {", "--signal=SIGUSR1", "--kill-whom=main", "postrotate"} {
		if !strings.Contains(s, want) {
			t.Errorf("logrotate file lacks %q", want)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "copytruncate" {
			t.Error("copytruncate loses lines; sentry reopens on SIGUSR1")
		}
	}
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	var froms []string
	var final []string // instructions of the last stage
	var goArg string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
			final = nil
		case "ARG":
			if strings.HasPrefix(f[1], "GO_VERSION=") {
				goArg = strings.TrimPrefix(f[1], "GO_VERSION=")
			}
		}
		final = append(final, line)
	}
	if len(froms) < 2 || !strings.HasPrefix(froms[0], "golang:") {
		t.Fatalf("want a multi-stage build from golang, got FROM %v", froms)
	}
	last := froms[len(froms)-1]
	if !strings.HasPrefix(last, "gcr.io/distroless/static") && last != "scratch" {
		t.Errorf("final stage FROM %s: want distroless/static or scratch", last)
	}
	if goVersion == nil || goArg != string(goVersion[1]) {
		t.Errorf("GO_VERSION=%s, go.mod says go %s", goArg, goVersion[1])
	}
	body := strings.Join(final, "\n")
	if m := regexp.MustCompile(`(?m)^USER (\S+)`).FindStringSubmatch(body); m == nil || m[1] == "root" || strings.HasPrefix(m[1], "0") {
		t.Errorf("final stage must run as a non-root USER")
	}
	if !strings.Contains(body, "ENTRYPOINT") {
		t.Errorf("final stage has no ENTRYPOINT")
	}
	if !strings.Contains(string(data), "CGO_ENABLED=0") {
		t.Errorf("the binary must be static (CGO_ENABLED=0) for distroless/static")
	}
	for _, p := range []string{"../go.mod", "../go.sum", "../cmd/sentry"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the build copies %s: %v", p, err)
		}
	}
}

// TestReleaseStamps: the release script and the Dockerfile stamp the
// version and commit through the variables cmd/sentry reads; a renamed
// variable would make -X a silent no-op and every build say "devel".
func TestReleaseStamps(t *testing.T) {
	src, err := os.ReadFile("../cmd/sentry/version.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"buildVersion", "buildCommit"} {
		if !regexp.MustCompile(`(?m)^\s+` + v + `\s+= ""`).Match(src) {
			t.Errorf("cmd/sentry/version.go declares no string variable %s", v)
		}
	}
	for _, f := range []string{"../scripts/release.sh", "Dockerfile"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"-X main.buildVersion=", "-X main.buildCommit="} {
			if !strings.Contains(string(data), v) {
				t.Errorf("%s does not stamp %s", f, v)
			}
		}
	}
	script, _ := os.ReadFile("../scripts/release.sh")
	for _, want := range []string{"linux/amd64", "linux/arm64", "sha256sum", "docker info", "CGO_ENABLED=0"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("scripts/release.sh lacks %q", want)
		}
	}
}
