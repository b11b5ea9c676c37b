package e2e

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestClassesInMetricsMatchRules runs the binary with the three-classes
// example's own rules and checks that each request is counted under the
// class its rules name.
func TestClassesInMetricsMatchRules(t *testing.T) {
	b := newTestBackend(t, "be", 0)
	raw, err := os.ReadFile("../deploy/examples/three-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	listen, admin := freePort(t), freePort(t)
	cfg := strings.Replace(string(raw), "listen: 127.0.0.1:8080", "listen: "+listen, 1)
	cfg = regexp.MustCompile(`static: \[[^\]]*\]`).ReplaceAllString(cfg, "static: ["+b.addr+"]")
	cfg = "admin: {listen: " + admin + "}\n" + cfg
	startSentry(t, "http://"+admin+"/readyz", "run", "-config", writeFile(t, "classes.yaml", cfg))

	cases := []struct {
		method, path, header, cookie, class string
	}{
		{"GET", "/checkout/cart", "", "", "gold"},
		{"POST", "/api/v2/payments", "", "", "gold"},
		{"GET", "/anything", "X-Tier: gold", "", "gold"},
		{"GET", "/anything", "", "plan=premium", "gold"},
		{"GET", "/api/items", "", "", "silver"},
		{"GET", "/api/v2/payments", "", "", "silver"}, // GET is not in the gold rule's methods
		{"GET", "/", "", "session=abc", "silver"},
		{"GET", "/", "", "", "bronze"},
		{"GET", "/static/logo.png", "X-Tier: silver", "", "bronze"},
	}
	want := map[string]int{}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://"+listen+c.path, nil)
		if c.header != "" {
			k, v, _ := strings.Cut(c.header, ": ")
			req.Header.Set(k, v)
		}
		if c.cookie != "" {
			req.Header.Set("Cookie", c.cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			_, m := get(t, "http://"+admin+"/metrics")
			for _, l := range strings.Split(m, "\n") {
				if strings.HasPrefix(l, "sentry_batch_") || strings.HasPrefix(l, "sentry_class_") || strings.HasPrefix(l, "sentry_estimator") || strings.HasPrefix(l, "sentry_sla") {
					t.Log(l)
				}
			}
			t.Fatalf("%s %s: %d reject=%q retry=%q", c.method, c.path, resp.StatusCode, resp.Header.Get("X-Sentry-Reject"), resp.Header.Get("Retry-After"))
		}
		want[c.class]++
	}
	_, metrics := get(t, "http://"+admin+"/metrics")
	for class, n := range want {
		re := regexp.MustCompile(fmt.Sprintf(`sentry_admission_decisions_total\{app="shop",class="%s",verdict="admitted"\} (\d+)`, class))
		m := re.FindStringSubmatch(metrics)
		if m == nil {
			t.Errorf("no admitted series for class %s", class)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != n {
			t.Errorf("class %s: metrics count %d admitted, rules say %d", class, got, n)
		}
	}
}
