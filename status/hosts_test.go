package status

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sentry-proxy/sentry/policy"
)

func TestAllowHosts(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metrics")) })
	var list []string
	h := AllowHosts(func() []string { return list }, "Node1.Example.COM", ok)
	for _, tc := range []struct {
		allowed []string
		host    string
		want    int
	}{
		// Default: localhost, the machine's name and its first label, IP literals.
		{nil, "localhost:9901", 200},
		{nil, "LOCALHOST.", 200},
		{nil, "127.0.0.1:9901", 200},
		{nil, "[::1]:9901", 200},
		{nil, "[::1]", 200},
		{nil, "10.1.2.3:9901", 200},
		{nil, "node1.example.com:9901", 200},
		{nil, "node1", 200},
		{nil, "", 200},
		{nil, "rebind.attacker.example:9901", 421},
		{nil, "localhost.attacker.example", 421},
		{nil, "127.0.0.1.nip.io", 421},
		{nil, "0x7f.1", 421}, // not an IP literal to netip: a name
		// A written list replaces the names; IP literals still pass.
		{[]string{"metrics.internal"}, "metrics.internal:9901", 200},
		{[]string{"metrics.internal"}, "localhost:9901", 421},
		{[]string{"metrics.internal"}, "127.0.0.1:9901", 200},
		{[]string{}, "localhost", 421},
		{[]string{}, "[::1]:1", 200},
		{[]string{policy.AnyHost}, "anything.example", 200},
	} {
		list = tc.allowed
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("allowed %q, Host %q: %d, want %d", tc.allowed, tc.host, rec.Code, tc.want)
		}
		if tc.want == 421 && rec.Body.String() == "metrics" {
			t.Errorf("Host %q: refused but served the page", tc.host)
		}
	}
}
