package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// Long values are never echoed in full: every message quotes at most 64
// bytes of a value, followed by …(N bytes), wherever the value sits and
// whichever check (the decoder's or a library's error) reports it.
func TestLongValuesClipped(t *testing.T) {
	const n = 2 << 20
	long := strings.Repeat("a", n)
	digits := strings.Repeat("9", n)
	src := fmt.Sprintf(`
admin: {listen: "%[1]s", allowed_hosts: ["%[1]s"]}
apps:
  - name: web
    listen: "%[1]s:80"
    hosts: ["%[1]s/"]
    backends: {static: ["%[1]s"]}
    timeouts: {connect: "%[1]s"}
    estimator: {max_keys: %[2]s}
    classes:
      - {name: gold, rules: [{path_regexp: "(%[1]s"}]}
      - {name: "%[1]s", default: true}
    ? %[1]s
    : 1
`, long, digits)
	_, err := Parse("p.yaml", []byte(src))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	if len(es) < 8 {
		t.Errorf("only %d errors:\n%v", len(es), err)
	}
	for _, e := range es {
		msg := e.Error()
		if len(msg) > 1200 {
			t.Errorf("message of %d bytes: %.200s…", len(msg), msg)
		}
		if !strings.Contains(msg, "bytes)") {
			t.Errorf("no …(N bytes) marker: %s", msg)
		}
		if strings.Contains(msg, strings.Repeat("a", 65)) || strings.Contains(msg, strings.Repeat("9", 65)) {
			t.Errorf("more than 64 bytes of a value: %.300s", msg)
		}
	}
	t.Logf("%d errors, e.g.\n%s", len(es), es[:min(4, len(es))])
}

func TestClipValues(t *testing.T) {
	v := strings.Repeat("é", 40) // 80 bytes, 2 per rune
	for _, tc := range []struct{ in, want string }{
		{`short "kept" as is`, `short "kept" as is`},
		{fmt.Sprintf(`host %q: bad`, strings.Repeat("x", 64)), fmt.Sprintf(`host %q: bad`, strings.Repeat("x", 64))},
		{fmt.Sprintf(`host %q: bad`, strings.Repeat("x", 65)), fmt.Sprintf(`host %q…(65 bytes): bad`, strings.Repeat("x", 64))},
		{fmt.Sprintf(`name %q`, v), fmt.Sprintf(`name %q…(80 bytes)`, strings.Repeat("é", 32))},
		{fmt.Sprintf(`name %q`, "a\"b"+strings.Repeat("c", 70)), fmt.Sprintf(`name %q…(73 bytes)`, "a\"b"+strings.Repeat("c", 61))},
		{"integer " + strings.Repeat("1", 200) + " is out of range", "integer " + strings.Repeat("1", 64) + "…(200 bytes) is out of range"},
		{`a lone " quote stays ` + strings.Repeat("w", 10), `a lone " quote stays ` + strings.Repeat("w", 10)},
	} {
		if got := clipValues(tc.in); got != tc.want {
			t.Errorf("clipValues(%.80q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	// A message long in every word still ends up bounded, valid UTF-8.
	words := strings.Repeat(strings.Repeat("ü", 60)+" ", 100)
	if got := clipValues(words); len(got) > maxMsg+32 || !utf8.ValidString(got) || !strings.Contains(got, "bytes)…") {
		t.Errorf("long message: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}
