package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Secret is a value the policy reads from a file (admin.token_file) and
// never prints: String, GoString and so every fmt verb show "xxxxx" (or
// "" when unset), and JSON sees no field. Compare it with Equal, which
// takes the same time whatever it is given.
type Secret struct{ sum *[sha256.Size]byte }

// NewSecret keeps v as a Secret (tests and the quick policy; the policy
// reads it from a file). An empty v is an unset Secret.
func NewSecret(v []byte) Secret {
	if len(v) == 0 {
		return Secret{}
	}
	sum := sha256.Sum256(v)
	return Secret{sum: &sum}
}

// IsSet reports whether the secret holds a value.
func (s Secret) IsSet() bool { return s.sum != nil }

// Equal reports whether v is the secret. Both sides are compared as
// SHA-256 sums in constant time, so neither the content nor the length of
// the secret shows in how long it takes. An unset Secret equals nothing.
func (s Secret) Equal(v []byte) bool {
	if s.sum == nil {
		return false
	}
	got := sha256.Sum256(v)
	return subtle.ConstantTimeCompare(got[:], s.sum[:]) == 1
}

// String masks the secret.
func (s Secret) String() string {
	if s.sum == nil {
		return ""
	}
	return "xxxxx"
}

// GoString masks the secret for %#v.
func (s Secret) GoString() string { return "policy.Secret(" + s.String() + ")" }

// Bounds of admin.token_file's token.
const (
	minTokenLen = 16
	maxTokenLen = 4096
)

// tokenFile decodes admin.token_file: a file that holds one bearer token
// (RFC 6750's b64token: letters, digits and -._~+/, then = padding),
// trailing white space ignored, at least minTokenLen bytes. The file is
// read on every load and reload, so a new token is a reload away.
func (d *decoder) tokenFile(n *yaml.Node, path string, a *Admin) {
	s, ok := d.str(n, path)
	if !ok {
		return
	}
	if s == "" {
		d.errorf(n, path, "empty file name; leave token_file out for no token")
		return
	}
	if !filepath.IsAbs(s) && d.baseDir != "" {
		s = filepath.Join(d.baseDir, s)
	}
	tok, err := readToken(s)
	if err != nil {
		d.errorf(n, path, "%s: %v", s, err)
		return
	}
	a.TokenFile, a.Token = s, NewSecret(tok)
}

func readToken(file string) ([]byte, error) {
	fi, err := os.Stat(file)
	switch {
	case err != nil:
		return nil, errors.Unwrap(err) // the path is in the message already
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > maxTokenLen+64:
		return nil, fmt.Errorf("%d bytes; a token file holds one token of at most %d bytes", fi.Size(), maxTokenLen)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, errors.Unwrap(err)
	}
	tok := strings.TrimRight(string(b), " \t\r\n")
	switch {
	case tok == "":
		return nil, errors.New("the file is empty; write a token in it (openssl rand -hex 32)")
	case len(tok) < minTokenLen:
		return nil, fmt.Errorf("the token is %d bytes; use at least %d (openssl rand -hex 32)", len(tok), minTokenLen)
	case len(tok) > maxTokenLen:
		return nil, fmt.Errorf("the token is %d bytes; at most %d", len(tok), maxTokenLen)
	case !isB64Token(tok):
		// Never echo the content: it is a secret, even a bad one.
		return nil, errors.New("the token must be one word of letters, digits and -._~+/ (then = padding), as a bearer token is (openssl rand -hex 32)")
	}
	return []byte(tok), nil
}

// isB64Token reports whether s is RFC 6750's b64token.
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0 {
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
