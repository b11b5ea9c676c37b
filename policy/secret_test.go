package policy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testToken = "0123456789abcdef0123456789abcdef"

// TestTokenFile: admin.token_file is read (relative to the policy's
// directory, a trailing newline dropped) into a Secret that never prints,
// and the dump writes the file's name, never the token.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := "admin: {token_file: admin.token}\napps: [{name: a, backends: {static: [\"127.0.0.1:1\"]}}]\n"
	s := loadFrom(t, filepath.Join(dir, "p.yaml"), []byte(src))
	if s.Admin.TokenFile != filepath.Join(dir, "admin.token") || !s.Admin.Token.IsSet() {
		t.Fatalf("admin %+v", s.Admin)
	}
	if !s.Admin.Token.Equal([]byte(testToken)) || s.Admin.Token.Equal([]byte(testToken+"\n")) || s.Admin.Token.Equal(nil) {
		t.Fatal("Equal")
	}
	j, _ := json.Marshal(s.Admin)
	for _, shown := range []string{fmt.Sprint(s.Admin), fmt.Sprintf("%+v %#v %s %x %q", s.Admin, s.Admin, s.Admin.Token, s.Admin.Token, s.Admin.Token), string(j)} {
		if strings.Contains(shown, testToken) || strings.Contains(shown, fmt.Sprintf("%x", testToken)) {
			t.Fatalf("the token shows: %s", shown)
		}
	}
	out, err := Dump(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "token_file: "+filepath.Join(dir, "admin.token")) || strings.Contains(string(out), testToken) {
		t.Fatalf("dump:\n%s", out)
	}
	var unset Secret
	if unset.IsSet() || unset.Equal([]byte("")) || unset.String() != "" {
		t.Fatal("an unset Secret")
	}
}

// TestTokenFileErrors: a token file that cannot serve is a policy error
// at its line, and the message never shows the file's content.
func TestTokenFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		file, want string
	}{
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
		{write("empty", "\n"), "empty"},
		{write("short", "abc123\n"), "at least 16"},
		{write("spaces", "secret token with spaces in it\n"), "one word"},
		{write("twolines", testToken+"\n"+testToken+"\n"), "one word"},
		{write("huge", strings.Repeat("a", 5000)), "at most"},
		{`""`, "empty file name"},
	} {
		src := fmt.Sprintf("admin:\n  token_file: %s\napps: [{name: a, backends: {static: [\"127.0.0.1:1\"]}}]\n", tc.file)
		_, err := Parse(filepath.Join(dir, "p.yaml"), []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ":2:") {
			t.Errorf("%s: %v, want %q at line 2", tc.file, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret token") {
			t.Errorf("the error shows the file's content: %v", err)
		}
	}
	// b64token's padding.
	for tok, ok := range map[string]bool{testToken + "==": true, testToken + "=a": false, "=" + testToken: false, testToken + "~+/._-": true} {
		if isB64Token(tok) != ok {
			t.Errorf("isB64Token(%q) = %v", tok, !ok)
		}
	}
}
