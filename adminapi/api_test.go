package adminapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sentry-proxy/sentry/lb"
	"github.com/sentry-proxy/sentry/policy"
)

// testAPI is an API over one app "web" with a real pool and no
// admission stack.
func testAPI(t *testing.T) (*API, *lb.Pool) {
	t.Helper()
	pool := lb.NewPool(lb.Options{}, []string{"10.0.0.1:80", "10.0.0.2:80"})
	snap := &policy.Snapshot{Log: policy.Log{Level: "info"}, Apps: []*policy.App{{Name: "web"}}}
	log := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Info})
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	api := New(Options{Logger: log, Policy: func() *policy.Snapshot { return snap },
		Pool: func(app string) *lb.Pool {
			if app == "web" {
				return pool
			}
			return nil
		},
		Now: func() time.Time { return at }})
	return api, pool
}

func post(t *testing.T, api *API, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", path, nil)
	req.RemoteAddr = "127.0.0.1:1234"
	rec := httptest.NewRecorder()
	h := api.Routes()[req.URL.Path]
	if h == nil {
		t.Fatalf("no route %s", req.URL.Path)
	}
	h.ServeHTTP(rec, req)
	return rec
}

// TestOverridesFollowLiveState: an override whose backend left the pool
// (a DNS change) is no longer shown; one the pool still holds is.
func TestOverridesFollowLiveState(t *testing.T) {
	api, pool := testAPI(t)
	for _, b := range []string{"10.0.0.1:80", "10.0.0.2:80"} {
		if rec := post(t, api, "/runtime/backend?backend="+b+"&state=drain"); rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	if ov := api.Overrides(); len(ov) != 2 || ov[0].At != "2025-01-02T03:04:05Z" || ov[0].By != "127.0.0.1:1234" {
		t.Fatalf("overrides %+v", ov)
	}
	pool.SetAddrs([]string{"10.0.0.1:80"})
	ov := api.Overrides()
	if len(ov) != 1 || ov[0].Backend != "10.0.0.1:80" {
		t.Fatalf("after 10.0.0.2 left: %+v", ov)
	}
	// Changed behind the API's back (not that anything does): not shown.
	pool.SetState("10.0.0.1:80", lb.Enabled)
	if ov := api.Overrides(); len(ov) != 0 {
		t.Fatalf("after an enable elsewhere: %+v", ov)
	}
}

// TestNoAdmission: without admission stacks, modes cannot be forced and
// GET shows none.
func TestNoAdmission(t *testing.T) {
	api, _ := testAPI(t)
	if rec := post(t, api, "/runtime/admission?mode=off"); rec.Code != http.StatusNotImplemented {
		t.Fatalf("%d", rec.Code)
	}
	req := httptest.NewRequest("GET", "/runtime/admission", nil)
	rec := httptest.NewRecorder()
	api.Routes()["/runtime/admission"].ServeHTTP(rec, req)
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != "[]" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestLevelName(t *testing.T) {
	for l, want := range map[hclog.Level]string{hclog.Trace: "trace", hclog.Debug: "debug", hclog.Info: "info", hclog.Warn: "warn", hclog.Error: "error", hclog.Off: "off"} {
		if got := levelName(l); got != want {
			t.Errorf("levelName(%v) = %q", l, got)
		}
	}
}

// TestRevertTellsEveryEnd: Revert logs the end of an override whose
// backend left the pool before it, as well as those it undoes.
func TestRevertTellsEveryEnd(t *testing.T) {
	api, pool := testAPI(t)
	var buf strings.Builder
	api.log = hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	post(t, api, "/runtime/backend?backend=10.0.0.1:80&state=drain")
	post(t, api, "/runtime/backend?backend=10.0.0.2:80&state=disable")
	pool.SetAddrs([]string{"10.0.0.1:80"})
	if n := api.Revert("reload"); n != 1 {
		t.Fatalf("Revert = %d", n)
	}
	logs := buf.String()
	for _, want := range []string{"runtime override reverted: backend state: app=web backend=10.0.0.1:80 from=draining to=enabled by=reload",
		"runtime override ended: kind=backend app=web backend=10.0.0.2:80 was=disabled by=reload"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if len(api.Overrides()) != 0 {
		t.Fatal("overrides left")
	}
}
