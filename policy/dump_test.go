package policy

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDump: the dump of a policy is YAML that shows the defaults the file
// left out, durations as text, derived listeners, and masks a webhook
// URL's password and query.
func TestDump(t *testing.T) {
	src := `
apps:
  - name: web
    listen: 127.0.0.1:8080
    backends: {static: ["127.0.0.1:9000"]}
    trusted_proxies: [10.0.0.0/8]
    provisioning:
      webhook: {url: "https://ops:hunter2@hooks.example/ask?token=s3cret"}
`
	s, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Dump(s)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	var back map[string]any
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatalf("dump is not YAML: %v\n%s", err, text)
	}
	for _, want := range []string{
		"read_header_timeout: 10s", // a default the file left out
		"max_conns_per_backend:",
		"request_id_header: X-Request-Id",
		"- 10.0.0.0/8",
		"listeners:",
		"hooks.example",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
	for _, secret := range []string{"hunter2", "s3cret"} {
		if strings.Contains(text, secret) {
			t.Errorf("dump shows %q", secret)
		}
	}
	if strings.Count(text, "max_conns_per_backend:") != 1 {
		t.Error("an app is dumped more than once (a listener should name it)")
	}
	if strings.Contains(text, "hash:") {
		t.Error("dump shows the source hash")
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"ReadHeaderTimeout": "read_header_timeout", "TLS": "tls", "RequestIDHeader": "request_id_header",
		"MaxConnsPerBackend": "max_conns_per_backend", "Name": "name", "P90": "p90",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
