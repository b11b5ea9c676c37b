package fairshare

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"hash/maphash"
	"net/netip"

	"github.com/sentry-proxy/sentry/classify"
)

// Source is where a request's client identity is read from.
type Source uint8

const (
	// FromAddress: the client's address after trusted_proxies (the
	// default). IPv6 addresses are grouped by their first IPv6Prefix bits.
	FromAddress Source = iota
	// FromHeader: the value of a request header (an API key).
	FromHeader
	// FromCookie: the value of a cookie (a session).
	FromCookie
	// FromJWTClaim: a claim of the JSON Web Token in the Authorization
	// header (Bearer), read WITHOUT verifying its signature: a client can
	// name itself anything there, so use it only where the token is
	// verified before the request reaches sentry's clients, or where a
	// forged name costs the forger nothing more than another name would.
	FromJWTClaim
)

var sourceNames = [...]string{FromAddress: "address", FromHeader: "header", FromCookie: "cookie", FromJWTClaim: "jwt_claim"}

// String is the source's policy name.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// ParseSource parses a policy name: address, header, cookie or jwt_claim.
func ParseSource(s string) (Source, error) {
	for i, n := range sourceNames {
		if n == s {
			return Source(i), nil
		}
	}
	return 0, fmt.Errorf("fairshare: unknown client source %q (want address, header, cookie or jwt_claim)", s)
}

// DefaultIPv6Prefix groups IPv6 clients by /64, the block one subscriber
// usually holds: a client that may pick any address of its /64 is still
// one client.
const DefaultIPv6Prefix = 64

// Identity says how a request's client is named. The zero value names a
// client by its whole address (IPv6 by its /128); policy fills
// IPv6Prefix. Immutable once in a policy snapshot.
type Identity struct {
	From Source
	// Name is the header or cookie name, or the claim (FromJWTClaim).
	Name string
	// IPv6Prefix is how many leading bits of an IPv6 address name the
	// client, 1–128; 0 means 128.
	IPv6Prefix int
}

// seed keys the identity hash for this process: client keys are not
// predictable from outside, so a client cannot pick identities that
// collide in the table on purpose.
var seed = maphash.MakeSeed()

// Namespaces keep keys from different sources apart.
const (
	nsAddr   = 0x9E3779B97F4A7C15
	nsHeader = 0xC2B2AE3D27D4EB4F
	nsCookie = 0x165667B19E3779F9
	nsClaim  = 0x27D4EB2F165667C5
)

// Key returns the request's client key: a 64-bit hash of its identity,
// never 0. A request without the configured header, cookie or claim is
// named by its address. v may be nil for FromAddress. Key does not
// allocate.
func (id *Identity) Key(v classify.Request, addr netip.Addr) uint64 {
	if v != nil {
		switch id.From {
		case FromHeader:
			if b := v.Peek(id.Name); len(b) > 0 {
				return nonzero(maphash.Bytes(seed, b) ^ nsHeader)
			}
		case FromCookie:
			if b := v.Cookie(id.Name); len(b) > 0 {
				return nonzero(maphash.Bytes(seed, b) ^ nsCookie)
			}
		case FromJWTClaim:
			var buf [maxPayload]byte
			if b := jwtClaim(v.Peek("Authorization"), id.Name, buf[:]); len(b) > 0 {
				return nonzero(maphash.Bytes(seed, b) ^ nsClaim)
			}
		}
	}
	return AddrKey(addr, id.IPv6Prefix)
}

// AddrKey is the key of a client named by its address, IPv6 grouped by
// its first prefix bits (0: 128); an IPv4-mapped IPv6 address is its IPv4
// address. The invalid address has key 0 (no identity).
func AddrKey(addr netip.Addr, prefix int) uint64 {
	if !addr.IsValid() {
		return 0
	}
	addr = addr.Unmap()
	a := addr.As16()
	if addr.Is6() && prefix > 0 && prefix < 128 {
		for i := range a {
			switch bit := i * 8; {
			case bit >= prefix:
				a[i] = 0
			case bit+8 > prefix:
				a[i] &= ^byte(0xFF >> (prefix - bit))
			}
		}
	}
	return nonzero(maphash.Bytes(seed, a[:]) ^ nsAddr)
}

func nonzero(k uint64) uint64 {
	if k == 0 {
		return 1
	}
	return k
}

// maxPayload bounds the decoded JWT payload Key reads (on the stack): a
// token with a larger payload names its client by address.
const maxPayload = 2048

// jwtClaim returns the raw value of the top-level claim name in the
// payload of the bearer token in auth (an Authorization header value),
// decoded into buf: a string's bytes between its quotes (escapes left as
// they are), or a number, true, false, an object or an array as written.
// nil when there is no such token or claim. The signature is not checked.
func jwtClaim(auth []byte, name string, buf []byte) []byte {
	const bearer = "bearer "
	if len(auth) <= len(bearer) || !bytes.EqualFold(auth[:len(bearer)], []byte(bearer)) {
		return nil
	}
	tok := bytes.TrimSpace(auth[len(bearer):])
	dot := bytes.IndexByte(tok, '.')
	if dot < 0 {
		return nil
	}
	payload := tok[dot+1:]
	end := bytes.IndexByte(payload, '.')
	if end < 0 {
		return nil
	}
	payload = payload[:end]
	for len(payload) > 0 && payload[len(payload)-1] == '=' {
		payload = payload[:len(payload)-1]
	}
	if base64.RawURLEncoding.DecodedLen(len(payload)) > len(buf) {
		return nil
	}
	n, err := base64.RawURLEncoding.Decode(buf, payload)
	if err != nil {
		return nil
	}
	return topLevel(buf[:n], name)
}

// topLevel finds the value of key name in the JSON object js (top level
// only). It is a scanner, not a parser: it skips what it does not need and
// gives up (nil) on anything malformed.
func topLevel(js []byte, name string) []byte {
	i := skipSpace(js, 0)
	if i >= len(js) || js[i] != '{' {
		return nil
	}
	i++
	for {
		i = skipSpace(js, i)
		if i >= len(js) || js[i] != '"' {
			return nil
		}
		ks, ke, ok := stringAt(js, i)
		if !ok {
			return nil
		}
		i = skipSpace(js, ke+1)
		if i >= len(js) || js[i] != ':' {
			return nil
		}
		i = skipSpace(js, i+1)
		vs, ve, ok := valueAt(js, i)
		if !ok {
			return nil
		}
		if string(js[ks+1:ke]) == name {
			if js[vs] == '"' {
				return js[vs+1 : ve]
			}
			return js[vs : ve+1]
		}
		i = skipSpace(js, ve+1)
		if i >= len(js) {
			return nil
		}
		switch js[i] {
		case ',':
			i++
		default: // '}' or garbage: the claim is not there
			return nil
		}
	}
}

func skipSpace(js []byte, i int) int {
	for i < len(js) && (js[i] == ' ' || js[i] == '\t' || js[i] == '\n' || js[i] == '\r') {
		i++
	}
	return i
}

// stringAt returns the index of the closing quote of the string that
// opens at i.
func stringAt(js []byte, i int) (start, end int, ok bool) {
	for j := i + 1; j < len(js); j++ {
		switch js[j] {
		case '\\':
			j++
		case '"':
			return i, j, true
		}
	}
	return 0, 0, false
}

// valueAt returns the first and last index of the JSON value at i.
func valueAt(js []byte, i int) (start, end int, ok bool) {
	if i >= len(js) {
		return 0, 0, false
	}
	switch js[i] {
	case '"':
		return stringAt(js, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(js); j++ {
			switch js[j] {
			case '"':
				_, e, ok := stringAt(js, j)
				if !ok {
					return 0, 0, false
				}
				j = e
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	j := i
	for j < len(js) && js[j] != ',' && js[j] != '}' && js[j] != ' ' && js[j] != '\t' && js[j] != '\n' && js[j] != '\r' {
		j++
	}
	if j == i {
		return 0, 0, false
	}
	return i, j - 1, true
}
