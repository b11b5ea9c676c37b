package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"
	"gopkg.in/yaml.v3"

	"github.com/sentry-proxy/sentry/internal/testpki"
)

// TestDump: the dump of a policy is YAML that shows the defaults the file
// left out, durations as text, and masks a webhook URL's password and
// query.
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
	for _, want := range []string{
		"read_header_timeout: 10s", // a default the file left out
		"max_conns_per_backend: 1024",
		"request_id_header: X-Request-Id",
		"trusted_proxies: [10.0.0.0/8]",
		"url: https://ops:xxxxx@hooks.example/ask?xxxxx",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dump lacks %q:\n%s", want, text)
		}
	}
	for _, secret := range []string{"hunter2", "s3cret"} {
		if strings.Contains(text, secret) {
			t.Errorf("dump shows %q", secret)
		}
	}
	if !strings.HasPrefix(text, "# ") || !strings.Contains(text, "every default filled in") {
		t.Errorf("dump does not open with its comment:\n%s", text)
	}
}

// TestDumpVocabulary: the dump names keys as the policy does and writes
// enums by name, with no placeholder, and is itself a valid policy (it
// used to write h2_c, n_req, request_buffering_off, grpc_status: 14 and
// nulls, which the decoder refused with 22 errors).
func TestDumpVocabulary(t *testing.T) {
	src := `
apps:
  - name: web
    h2c: true
    backends: {static: ["127.0.0.1:9000"]}
    request_buffering: off
    reject: {grpc_status: resource_exhausted}
    admission: {adaptive: {nreq: 50}}
`
	s := mustParse(t, src)
	out, err := Dump(s)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{"h2c: true", "nreq: 50", "request_buffering: off", "grpc_status: resource_exhausted", "access:\n    enabled: false"} {
		if !strings.Contains(text, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
	for _, bad := range []string{"h2_c", "n_req", "request_buffering_off", "access_log", "null", "listeners:", "hash:", "index:"} {
		if strings.Contains(text, bad) {
			t.Errorf("dump has %q", bad)
		}
	}
	if _, err := Parse("dump.yaml", out); err != nil {
		t.Fatalf("the dump is not a valid policy:\n%v\n%s", err, text)
	}
}

// loadFrom parses data as if it were the file at path (for relative file
// names).
func loadFrom(t *testing.T, path string, data []byte) *Snapshot {
	t.Helper()
	s, err := Parse(path, data)
	if err != nil {
		t.Fatalf("%s:\n%v\n%s", path, err, data)
	}
	return s
}

// roundTrip dumps s, reads the dump back from a file elsewhere, and checks
// that the second dump is byte for byte the first and that the two
// snapshots are the same policy. It returns the dump.
func roundTrip(t *testing.T, name string, s *Snapshot) []byte {
	t.Helper()
	out1, err := Dump(s)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dump.yaml")
	if err := os.WriteFile(f, out1, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := Load(f)
	if err != nil {
		t.Fatalf("%s: the dump is not a valid policy:\n%v\n%s", name, err, out1)
	}
	out2, err := Dump(s2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out1, out2) {
		t.Errorf("%s: dump → check → dump differs:\n--- first\n%s\n--- second\n%s", name, out1, out2)
	}
	// Byte-identical dumps would not show a key the dump forgets (both
	// would lack it): the snapshots must be the same policy too.
	a, b := comparable(s), comparable(s2)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s: the dump read back is another policy:\n%+v\nwant\n%+v", name, b, a)
	}
	return out1
}

// comparable is a copy of s without what depends on where the policy was
// read (its source, hash and relative file names) and with the secrets
// masked as the dump masks them.
func comparable(s *Snapshot) Snapshot {
	c := *s
	c.Source, c.Hash = "", [32]byte{}
	abs := func(p *string) {
		if *p != "" {
			*p, _ = filepath.Abs(*p)
		}
	}
	c.Apps = nil
	for _, a := range s.Apps {
		ac := *a
		if a.TLS != nil {
			tl := *a.TLS
			abs(&tl.CertFile)
			abs(&tl.KeyFile)
			abs(&tl.OCSPFile)
			ac.TLS = &tl
		}
		if a.Backends.TLS != nil {
			bt := *a.Backends.TLS
			abs(&bt.CAFile)
			abs(&bt.CertFile)
			abs(&bt.KeyFile)
			ac.Backends.TLS = &bt
		}
		if w := a.Provisioning.Webhook; w != nil {
			wc := *w
			wc.URL = redactURL(wc.URL)
			ac.Provisioning.Webhook = &wc
		}
		c.Apps = append(c.Apps, &ac)
	}
	c.Listeners = nil // derived from the apps, which are compared
	return c
}

// TestDumpRoundTrip: for every example, dump → check → dump gives the same
// bytes and the same policy.
func TestDumpRoundTrip(t *testing.T) {
	for _, f := range exampleFiles(t) {
		s, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, f, s)
	}
	// The quick policy of `sentry run -backend` (its /config).
	s, err := FromFlags("", []string{"127.0.0.1:9001,127.0.0.1:9002"}, "off")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, "flags", s)
}

// TestDumpPartitionFromHostname: index_from_hostname is written as such,
// with the index in force in a comment, so that one dump serves every
// replica.
func TestDumpPartitionFromHostname(t *testing.T) {
	src := []byte("apps: [{name: a, backends: {static: [\"h:1\"]}, partition: {count: 3, index_from_hostname: true}}]\n")
	host := func() (string, error) { return "sentry-2", nil }
	s, err := parseWith("p.yaml", src, nodeBudget, host)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := Dump(s)
	if !strings.Contains(string(out), "index_from_hostname: true # index 2 here") || strings.Contains(string(out), "index:") {
		t.Fatalf("dump:\n%s", out)
	}
	s2, err := parseWith("p.yaml", out, nodeBudget, host)
	if err != nil {
		t.Fatal(err)
	}
	if out2, _ := Dump(s2); !bytes.Equal(out, out2) || s2.Apps[0].Partition != s.Apps[0].Partition {
		t.Fatalf("round trip:\n%s\n%s", out, out2)
	}
}

// everyKeyToken is the every-key policy's admin token: its dump must not
// show it.
const everyKeyToken = "every-key-token-0123456789abcdef"

// everyKey returns the every-key policy: the dump of testdata/every-key.yaml,
// which turns on every optional section, so that it sets every key.
func everyKey(t *testing.T) (*Snapshot, []byte) {
	t.Helper()
	dir := t.TempDir()
	pki, err := testpki.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := pki.OCSP(ocsp.Good, nil, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ocspFile := filepath.Join(dir, "leaf.ocsp")
	if err := os.WriteFile(ocspFile, resp, 0o600); err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join("testdata", "every-key.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(everyKeyToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seed = []byte(strings.NewReplacer("$CERT", pki.CertFile, "$KEY", pki.KeyFile, "$OCSP", ocspFile, "$TOKEN", tokenFile).Replace(string(seed)))
	s := loadFrom(t, filepath.Join(dir, "seed.yaml"), seed)
	out, err := Dump(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, out
}

// dumpPaths lists the key paths a document sets: "apps[].backends.tls.ca".
func dumpPaths(n *yaml.Node, prefix string, out map[string]bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			dumpPaths(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := joinPath(prefix, n.Content[i].Value)
			out[p] = true
			dumpPaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			dumpPaths(c, prefix+"[]", out)
		}
	}
}

// tablePaths lists the key paths of the decoder's key tables, in the same
// form, leaving out the x-* keys.
func tablePaths(k *kind, prefix string, out map[string]bool) {
	switch k.t {
	case kMap:
		for _, f := range k.fields() {
			if strings.HasSuffix(f.key, "*") {
				continue
			}
			p := joinPath(prefix, f.key)
			out[p] = true
			tablePaths(f.kind, p, out)
		}
	case kList:
		tablePaths(k.elem, prefix+"[]", out)
	case kUnion:
		for _, a := range k.alts {
			tablePaths(a, prefix, out)
		}
	}
}

func topKind() *kind {
	d := newDecoder("", "", 0)
	return mapKind(func() []field {
		s := defaultSnapshot()
		s.Apps = []*App{defaultApp()}
		return d.topFields(s, &meta{})
	})
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// docKeys returns the keys docs/policy.md's key tables list: the
// backquoted words of each row's first cell, as written there (a name,
// or a dotted path such as access.enabled). sub maps each of them to the
// words backquoted in the rest of its row, where a row may name the keys
// of its value ({name, value}).
func docKeys(t *testing.T) (keys map[string]bool, sub map[string]map[string]bool) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	keys, sub = map[string]bool{}, map[string]map[string]bool{}
	inTable := false
	cell := regexp.MustCompile("`([a-z0-9_.]+)`")
	quoted := regexp.MustCompile("`([^`]*)`")
	word := regexp.MustCompile("[a-z][a-z0-9_]*")
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "| Key |"):
			inTable = true
		case !strings.HasPrefix(l, "|"):
			inTable = false
		case inTable && !strings.HasPrefix(l, "|---"):
			cells := strings.SplitN(strings.TrimPrefix(l, "|"), "|", 2)
			for _, m := range cell.FindAllStringSubmatch(cells[0], -1) {
				keys[m[1]] = true
				if sub[m[1]] == nil {
					sub[m[1]] = map[string]bool{}
				}
				for _, q := range quoted.FindAllStringSubmatch(cells[1], -1) {
					for _, w := range word.FindAllString(q[1], -1) {
						sub[m[1]][w] = true
					}
				}
			}
		}
	}
	if len(keys) < 100 {
		t.Fatalf("found %d keys in docs/policy.md's tables; the parse is broken", len(keys))
	}
	return keys, sub
}

// TestEveryKeyPolicy: the every-key policy, built by the key tables (the
// dump of a seed that turns every optional section on), sets every key
// the tables hold and no other; every key docs/policy.md documents
// appears in it, and every key in it is documented (in a row of its own,
// or named in its parent's row); and it round-trips.
func TestEveryKeyPolicy(t *testing.T) {
	s, out := everyKey(t)
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	inDump := map[string]bool{}
	dumpPaths(&doc, "", inDump)
	inTables := map[string]bool{}
	tablePaths(topKind(), "", inTables)
	for _, p := range sortedKeys(inTables) {
		if !inDump[p] {
			t.Errorf("the every-key policy does not set %s (turn its section on in testdata/every-key.yaml)", p)
		}
	}
	for _, p := range sortedKeys(inDump) {
		if !inTables[p] {
			t.Errorf("the dump writes %s, which no key table has", p)
		}
	}
	// docs/policy.md: a documented key is a path of the dump, or the end
	// of one (tables list keys under their section's heading).
	names := map[string]bool{}
	for p := range inDump {
		p = strings.ReplaceAll(p, "[]", "")
		parts := strings.Split(p, ".")
		for i := range parts {
			names[strings.Join(parts[i:], ".")] = true
		}
	}
	docs, sub := docKeys(t)
	for _, k := range sortedKeys(docs) {
		if !names[k] {
			t.Errorf("docs/policy.md documents %q, which the every-key policy does not set", k)
		}
	}
	for _, p := range sortedKeys(inDump) {
		parts := strings.Split(strings.ReplaceAll(p, "[]", ""), ".")
		found := false
		for i := range parts {
			found = found || docs[strings.Join(parts[i:], ".")]
		}
		// Or named in its parent's row: headers: list of {name, value}.
		if n := len(parts); !found && n > 1 {
			found = sub[parts[n-2]][parts[n-1]]
		}
		if !found {
			t.Errorf("%s is not in docs/policy.md's tables", p)
		}
	}
	roundTrip(t, "every-key", s)
}

// TestDumpExtension: a dump with an extension key is the dump followed by
// that key, a valid policy that dumps back to the dump alone.
func TestDumpExtension(t *testing.T) {
	s, plain := everyKey(t)
	type entry struct {
		App   string `yaml:"app"`
		State string `yaml:"state"`
	}
	v := map[string]any{"log_level": "debug", "backends": []entry{{"shop", "draining"}}}
	out, err := DumpExtension(s, "x-runtime", "Runtime overrides.\nNot policy.", v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, plain) {
		t.Fatalf("the extended dump does not begin with the dump:\n%s", out)
	}
	rest := string(out[len(plain):])
	for _, want := range []string{"# Runtime overrides.\n# Not policy.\nx-runtime:\n", "log_level: debug", "state: draining"} {
		if !strings.Contains(rest, want) {
			t.Errorf("extension lacks %q:\n%s", want, rest)
		}
	}
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := Load(f)
	if err != nil {
		t.Fatalf("the extended dump is not a valid policy: %v", err)
	}
	if again, _ := Dump(s2); !bytes.Equal(again, plain) {
		t.Fatalf("checked again it dumps to other bytes:\n%s", again)
	}
	if _, err := DumpExtension(s, "runtime", "", v); err == nil {
		t.Fatal("a key that is not x- was accepted")
	}
}
