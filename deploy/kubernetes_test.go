package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
)

// Strict decoding of the Kubernetes kit: each document is read with yaml.v3,
// turned into JSON, and decoded with unknown fields refused into the real
// API type of its apiVersion and kind (k8s.io/api, the Prometheus
// Operator's monitoring/v1). KEDA's ScaledObject and prometheus-adapter's
// rules file have no API module small enough to import (their types live in
// the projects' main modules), so they are decoded as strictly into the
// subset of their published schemas below.

// kedaScaledObject is keda.sh/v1alpha1 ScaledObject (KEDA v2), the fields
// this kit uses; an unknown field fails the decode.
type kedaScaledObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   map[string]any    `json:"metadata"`
	Spec       kedaScaledObjSpec `json:"spec"`
}

type kedaScaledObjSpec struct {
	ScaleTargetRef struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
	} `json:"scaleTargetRef"`
	PollingInterval *int32 `json:"pollingInterval"`
	CooldownPeriod  *int32 `json:"cooldownPeriod"`
	MinReplicaCount *int32 `json:"minReplicaCount"`
	MaxReplicaCount *int32 `json:"maxReplicaCount"`
	Advanced        *struct {
		HorizontalPodAutoscalerConfig *struct {
			Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
		} `json:"horizontalPodAutoscalerConfig"`
	} `json:"advanced"`
	Triggers []struct {
		Type       string            `json:"type"`
		MetricType string            `json:"metricType"`
		Metadata   map[string]string `json:"metadata"`
	} `json:"triggers"`
}

// adapterConfig is prometheus-adapter's rules file (its --config), the
// externalRules part.
type adapterConfig struct {
	ExternalRules []struct {
		SeriesQuery string `yaml:"seriesQuery"`
		Resources   struct {
			Overrides map[string]struct {
				Resource string `yaml:"resource"`
			} `yaml:"overrides"`
		} `yaml:"resources"`
		Name struct {
			Matches string `yaml:"matches"`
			As      string `yaml:"as"`
		} `yaml:"name"`
		MetricsQuery string `yaml:"metricsQuery"`
	} `yaml:"externalRules"`
}

// typedFor returns a new value of the API type for apiVersion and kind.
func typedFor(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	case "keda.sh/v1alpha1 ScaledObject":
		return &kedaScaledObject{}, nil
	}
	return nil, fmt.Errorf("no API type known for %s %s", apiVersion, kind)
}

// decodeStrict reads every document of file into its API type.
func decodeStrict(t *testing.T, file string) []any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []any
	for i := 1; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		if doc == nil {
			continue
		}
		apiVersion, _ := doc["apiVersion"].(string)
		kind, _ := doc["kind"].(string)
		obj, err := typedFor(apiVersion, kind)
		if err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
		jd := json.NewDecoder(bytes.NewReader(js))
		jd.DisallowUnknownFields()
		if err := jd.Decode(obj); err != nil {
			t.Fatalf("%s document %d (%s %s): %v", file, i, apiVersion, kind, err)
		}
		out = append(out, obj)
	}
	return out
}

func only[T any](t *testing.T, objs []any) []T {
	t.Helper()
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestKubernetesStrict: every manifest of the kit decodes strictly.
func TestKubernetesStrict(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) < 6 {
		t.Fatalf("found %d manifests", len(files))
	}
	for _, f := range files {
		if objs := decodeStrict(t, f); len(objs) == 0 {
			t.Errorf("%s: no objects", f)
		}
	}
}

// TestKEDAScaledObject: KEDA scales the backends to the servers-needed
// count: a Prometheus trigger summing sentry_provision_servers_needed with
// an AverageValue target of 1.
func TestKEDAScaledObject(t *testing.T) {
	sos := only[*kedaScaledObject](t, decodeStrict(t, "kubernetes/keda-scaledobject.yaml"))
	if len(sos) != 1 {
		t.Fatalf("%d ScaledObjects", len(sos))
	}
	so := sos[0].Spec
	if so.ScaleTargetRef.Kind != "Deployment" || so.ScaleTargetRef.Name != "shop-backend" {
		t.Errorf("scale target %+v", so.ScaleTargetRef)
	}
	if len(so.Triggers) != 1 {
		t.Fatalf("%d triggers", len(so.Triggers))
	}
	tr := so.Triggers[0]
	if tr.Type != "prometheus" || tr.MetricType != "AverageValue" || tr.Metadata["threshold"] != "1" ||
		!strings.Contains(tr.Metadata["query"], "sum(sentry_provision_servers_needed{") || tr.Metadata["serverAddress"] == "" {
		t.Errorf("trigger %+v", tr)
	}
	if so.MinReplicaCount == nil || so.MaxReplicaCount == nil || *so.MinReplicaCount < 1 || *so.MaxReplicaCount < *so.MinReplicaCount {
		t.Errorf("replica bounds %v %v", so.MinReplicaCount, so.MaxReplicaCount)
	}
	checkScaleDown(t, "KEDA", so.Advanced.HorizontalPodAutoscalerConfig.Behavior)
}

// checkScaleDown: at most one server removed per 30 s (no flapping).
func checkScaleDown(t *testing.T, what string, b *autoscalingv2.HorizontalPodAutoscalerBehavior) {
	t.Helper()
	if b == nil || b.ScaleDown == nil || len(b.ScaleDown.Policies) == 0 {
		t.Errorf("%s: no scale-down policy", what)
		return
	}
	for _, p := range b.ScaleDown.Policies {
		if p.Type != autoscalingv2.PodsScalingPolicy || p.Value > 1 || p.PeriodSeconds < 30 {
			t.Errorf("%s: scale-down policy %+v removes more than one server per 30 s", what, p)
		}
	}
}

// TestPrometheusAdapter: the adapter serves the metric the HPA reads, and
// the HPA targets an average of 1 per backend.
func TestPrometheusAdapter(t *testing.T) {
	objs := decodeStrict(t, "kubernetes/prometheus-adapter.yaml")
	cms := only[*corev1.ConfigMap](t, objs)
	hpas := only[*autoscalingv2.HorizontalPodAutoscaler](t, objs)
	if len(cms) != 1 || len(hpas) != 1 {
		t.Fatalf("%d ConfigMaps, %d HPAs", len(cms), len(hpas))
	}
	var cfg adapterConfig
	dec := yaml.NewDecoder(strings.NewReader(cms[0].Data["config.yaml"]))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("adapter config: %v", err)
	}
	served := map[string]bool{}
	for _, r := range cfg.ExternalRules {
		if _, err := regexp.Compile(r.Name.Matches); err != nil || r.SeriesQuery == "" || !strings.Contains(r.MetricsQuery, "<<.Series>>") {
			t.Errorf("rule %+v", r)
		}
		served[r.Name.As] = true
	}
	h := hpas[0].Spec
	if h.ScaleTargetRef.Kind != "Deployment" || h.ScaleTargetRef.Name != "shop-backend" || len(h.Metrics) != 1 {
		t.Fatalf("HPA %+v", h)
	}
	m := h.Metrics[0]
	if m.Type != autoscalingv2.ExternalMetricSourceType || m.External == nil || !served[m.External.Metric.Name] ||
		m.External.Metric.Name != "sentry_provision_servers_needed" || m.External.Target.Type != autoscalingv2.AverageValueMetricType ||
		m.External.Target.AverageValue == nil || m.External.Target.AverageValue.String() != "1" {
		t.Errorf("HPA metric %+v", m)
	}
	checkScaleDown(t, "adapter HPA", h.Behavior)
}

// TestSentryHPA: sentry's own HPA scales the Deployment of sentry.yaml on
// CPU, which that Deployment requests.
func TestSentryHPA(t *testing.T) {
	hpas := only[*autoscalingv2.HorizontalPodAutoscaler](t, decodeStrict(t, "kubernetes/sentry-hpa.yaml"))
	deps := only[*appsv1.Deployment](t, decodeStrict(t, "kubernetes/sentry.yaml"))
	if len(hpas) != 1 || len(deps) != 1 {
		t.Fatalf("%d HPAs, %d Deployments", len(hpas), len(deps))
	}
	h := hpas[0].Spec
	if h.ScaleTargetRef.Kind != "Deployment" || h.ScaleTargetRef.Name != deps[0].Name || hpas[0].Namespace != deps[0].Namespace {
		t.Errorf("HPA targets %+v in %s", h.ScaleTargetRef, hpas[0].Namespace)
	}
	if len(h.Metrics) != 1 || h.Metrics[0].Resource == nil || h.Metrics[0].Resource.Name != corev1.ResourceCPU ||
		h.Metrics[0].Resource.Target.AverageUtilization == nil {
		t.Fatalf("HPA metrics %+v", h.Metrics)
	}
	if _, ok := deps[0].Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Errorf("the Deployment requests no CPU: utilisation has no base")
	}
	// It scales out before sentry's own switch to threshold mode (85%).
	if u := *h.Metrics[0].Resource.Target.AverageUtilization; u >= 85 {
		t.Errorf("target utilisation %d%% is not below cpu_high", u)
	}
}

// TestStatefulSetPartition: the StatefulSet's ConfigMap gives every
// replica, by its ordinal, a valid policy with a distinct partition index,
// and count equals replicas.
func TestStatefulSetPartition(t *testing.T) {
	objs := decodeStrict(t, "kubernetes/sentry-statefulset.yaml")
	sss := only[*appsv1.StatefulSet](t, objs)
	cms := only[*corev1.ConfigMap](t, objs)
	svcs := only[*corev1.Service](t, objs)
	if len(sss) != 1 || len(cms) != 1 || len(svcs) != 1 {
		t.Fatalf("%d StatefulSets, %d ConfigMaps, %d Services", len(sss), len(cms), len(svcs))
	}
	ss := sss[0]
	if ss.Spec.ServiceName != svcs[0].Name || svcs[0].Spec.ClusterIP != "None" {
		t.Errorf("serviceName %q, governing Service %q (clusterIP %q)", ss.Spec.ServiceName, svcs[0].Name, svcs[0].Spec.ClusterIP)
	}
	vols := ss.Spec.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].ConfigMap == nil || vols[0].ConfigMap.Name != cms[0].Name {
		t.Fatalf("volumes %+v, ConfigMap %s", vols, cms[0].Name)
	}
	src := cms[0].Data["sentry.yaml"]
	const key = "index_from_hostname: true"
	if !strings.Contains(src, key) {
		t.Fatalf("the policy does not take its index from the host name")
	}
	replicas := int(*ss.Spec.Replicas)
	backends := make([]string, 60)
	for i := range backends {
		backends[i] = fmt.Sprintf("10.1.%d.%d:8080", i/250, i%250+1)
	}
	owners := map[string]int{}
	// The policy as pod sentry-i reads it: the ordinal in place of the
	// host name (policy.HostnameOrdinal is what Parse applies).
	for i := 0; i < replicas; i++ {
		host := ss.Name + "-" + strconv.Itoa(i)
		ord, err := policy.HostnameOrdinal(host)
		if err != nil || ord != i {
			t.Fatalf("%s: ordinal %d, %v", host, ord, err)
		}
		snap, err := policy.Parse("ConfigMap "+cms[0].Name, []byte(strings.Replace(src, key, "index: "+strconv.Itoa(ord), 1)))
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		pt := snap.Apps[0].Partition
		if pt.Count != replicas || pt.Index != i {
			t.Errorf("%s: partition %+v with %d replicas", host, pt, replicas)
		}
		for _, b := range (lb.Partition{Index: pt.Index, Count: pt.Count}).Filter(backends) {
			owners[b]++
		}
	}
	// The replicas' shares are disjoint and cover the farm.
	for _, b := range backends {
		if owners[b] != 1 {
			t.Errorf("backend %s owned by %d replicas", b, owners[b])
		}
	}
}

// TestMonitoring: the ServiceMonitor scrapes the admin port of sentry's
// pods, and the PrometheusRule has the alerts sentry's operators need, on
// metrics sentry exports.
func TestMonitoring(t *testing.T) {
	objs := decodeStrict(t, "kubernetes/monitoring.yaml")
	svcs := only[*corev1.Service](t, objs)
	sms := only[*monitoringv1.ServiceMonitor](t, objs)
	rules := only[*monitoringv1.PrometheusRule](t, objs)
	if len(svcs) != 1 || len(sms) != 1 || len(rules) != 1 {
		t.Fatalf("%d Services, %d ServiceMonitors, %d PrometheusRules", len(svcs), len(sms), len(rules))
	}
	for k, v := range sms[0].Spec.Selector.MatchLabels {
		if svcs[0].Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service has %q", k, v, svcs[0].Labels[k])
		}
	}
	if len(sms[0].Spec.Endpoints) != 1 || sms[0].Spec.Endpoints[0].Port != svcs[0].Spec.Ports[0].Name || sms[0].Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("endpoints %+v", sms[0].Spec.Endpoints)
	}
	known := docMetrics(t)
	for _, m := range []string{"sentry_sla_target_seconds", "sentry_upgrade_failures_total"} {
		if !known[m] {
			t.Fatalf("docs/metrics.md lacks %s", m)
		}
	}
	metricRe := regexp.MustCompile(`\bsentry_[a-z0-9_]+`)
	alerts := map[string]bool{}
	for _, g := range rules[0].Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			expr := r.Expr.String()
			for _, m := range metricRe.FindAllString(expr, -1) {
				if !known[m] {
					t.Errorf("alert %s uses %s, not in docs/metrics.md", r.Alert, m)
				}
			}
			if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s lacks a summary or a severity", r.Alert)
			}
		}
	}
	for _, a := range []string{"SentryPolicyReloadFailing", "SentrySLAMissed", "SentryDropRatioHigh", "SentryNoHealthyBackend", "SentryUpgradeFailed"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// TestPlainPrometheusRules: deploy/prometheus/sentry-rules.yaml (for a
// Prometheus without the Operator) holds exactly the PrometheusRule's
// groups, field for field, and decodes strictly.
func TestPlainPrometheusRules(t *testing.T) {
	objs := decodeStrict(t, "kubernetes/monitoring.yaml")
	rules := only[*monitoringv1.PrometheusRule](t, objs)
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules", len(rules))
	}
	b, err := os.ReadFile("prometheus/sentry-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var plain struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	js, err := yamlToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&plain); err != nil {
		t.Fatalf("sentry-rules.yaml: %v", err)
	}
	want, _ := json.Marshal(rules[0].Spec.Groups)
	got, _ := json.Marshal(plain.Groups)
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/prometheus/sentry-rules.yaml differs from the PrometheusRule in kubernetes/monitoring.yaml:\n got %s\nwant %s", got, want)
	}
}

// yamlToJSON converts one YAML document to JSON (for strict decoding into
// API types, which carry json tags).
func yamlToJSON(b []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}
