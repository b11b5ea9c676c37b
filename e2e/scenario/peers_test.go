package scenario

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const withSentry = minimal + `sentry:
  sla: {targets: [{target: 500ms}]}
  admission: {mode: batch}
`

func TestSentryPolicy(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(withSentry))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []bool{false, true} {
		b, err := SentryPolicy(sc, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000", "127.0.0.1:2001"}, off)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Admin struct{ Listen string }
			Apps  []struct {
				Name, Listen string
				Backends     struct{ Static []string }
				SLA          any `yaml:"sla"`
				Admission    struct{ Mode string }
			}
		}
		if err := yaml.Unmarshal(b, &p); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		a := p.Apps[0]
		want := map[bool]string{false: "batch", true: "off"}[off]
		if p.Admin.Listen != "127.0.0.1:1001" || a.Name != "t" || a.Listen != "127.0.0.1:1000" ||
			strings.Join(a.Backends.Static, ",") != "127.0.0.1:2000,127.0.0.1:2001" || a.SLA == nil || a.Admission.Mode != want {
			t.Errorf("off=%v: policy\n%s", off, b)
		}
	}
	// Without an admission section, off still writes mode off.
	sc2, _ := Parse("t.yaml", []byte(minimal))
	b, _ := SentryPolicy(sc2, "127.0.0.1:1000", "127.0.0.1:1001", []string{"127.0.0.1:2000"}, true)
	if !strings.Contains(string(b), `mode: "off"`) {
		t.Errorf("off policy without admission:\n%s", b)
	}
}

func TestPeerConfigsCheck(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(withSentry))
	if err != nil {
		t.Fatal(err)
	}
	backends := []string{"127.0.0.1:2000", "127.0.0.1:2001"}
	t.Run("haproxy", func(t *testing.T) {
		if lookBin("haproxy") != nil {
			t.Skip("haproxy not installed")
		}
		dir := t.TempDir()
		cfg := HAProxyConfig(sc, "127.0.0.1:1000", backends, filepath.Join(dir, "pid"))
		for _, want := range []string{"timeout queue 1000ms", "server s1 127.0.0.1:2001 maxconn 4", "option http-keep-alive", "balance leastconn"} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config lacks %q:\n%s", want, cfg)
			}
		}
		p := filepath.Join(dir, "haproxy.cfg")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("haproxy", "-c", "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, cfg)
		}
	})
	t.Run("nginx", func(t *testing.T) {
		if lookBin("nginx") != nil {
			t.Skip("nginx not installed")
		}
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
		cfg := NginxConfig(sc, "127.0.0.1:1000", backends, dir)
		for _, want := range []string{"limit_conn perserver 8;", "limit_conn_status 503;", "keepalive 32;", "server_name farm;"} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("config lacks %q:\n%s", want, cfg)
			}
		}
		p := filepath.Join(dir, "nginx.conf")
		os.WriteFile(p, cfg, 0o644)
		if out, err := exec.Command("nginx", "-t", "-q", "-p", dir, "-c", p, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
			t.Fatalf("nginx -t: %v\n%s\n%s", err, out, cfg)
		}
	})
}

func TestCappedWriter(t *testing.T) {
	var b strings.Builder
	w := &cappedWriter{w: &b}
	big := strings.Repeat("x", maxLogBytes-1)
	if n, err := w.Write([]byte(big)); n != len(big) || err != nil {
		t.Fatal(n, err)
	}
	if n, err := w.Write([]byte("abc")); n != 3 || err != nil || b.Len() != maxLogBytes {
		t.Fatalf("n %d err %v len %d", n, err, b.Len())
	}
}
