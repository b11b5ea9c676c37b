package fairshare

import (
	"encoding/base64"
	"net/netip"
	"strings"
	"testing"
)

// req is a classify.Request with headers and cookies.
type req struct {
	h map[string]string
	c map[string]string
}

func (r req) Method() []byte { return []byte("GET") }
func (r req) Path() []byte   { return []byte("/") }
func (r req) Host() []byte   { return nil }
func (r req) Peek(name string) []byte {
	for k, v := range r.h {
		if strings.EqualFold(k, name) {
			return []byte(v)
		}
	}
	return nil
}
func (r req) Cookie(name string) []byte {
	if v, ok := r.c[name]; ok {
		return []byte(v)
	}
	return nil
}

func TestAddrKey(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		x, y   string
		prefix int
		same   bool
	}{
		{"127.0.0.2", "127.0.0.2", 64, true},
		{"127.0.0.2", "127.0.0.3", 64, false},
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", 64, true}, // one /64: one client
		{"2001:db8:1:2::1", "2001:db8:1:3::1", 64, false},
		{"2001:db8:1:2::1", "2001:db8:1:2::2", 128, false},
		{"2001:db8:1:2::1", "2001:db8:1:2::2", 0, false}, // 0 means 128
		{"2001:db8:1:2::1", "2001:db8:1:2f::1", 56, true},
		{"2001:db8:1:2::1", "2001:db8:1:102::1", 56, false},
		{"2001:db8:1:2::1", "2001:db8:1:3::1", 63, true},
		{"192.0.2.1", "::ffff:192.0.2.1", 64, true}, // IPv4-mapped is IPv4
	} {
		kx, ky := AddrKey(a(tc.x), tc.prefix), AddrKey(a(tc.y), tc.prefix)
		if kx == 0 || ky == 0 {
			t.Errorf("%s, %s: a zero key", tc.x, tc.y)
		}
		if (kx == ky) != tc.same {
			t.Errorf("%s and %s at /%d: same key %v, want %v", tc.x, tc.y, tc.prefix, kx == ky, tc.same)
		}
	}
	if k := AddrKey(netip.Addr{}, 64); k != 0 {
		t.Errorf("the invalid address has key %x, want 0", k)
	}
}

func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return "Bearer " + enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc([]byte(payload)) + ".c2lnbmF0dXJl"
}

func TestKeySources(t *testing.T) {
	addr := netip.MustParseAddr("192.0.2.7")
	other := netip.MustParseAddr("192.0.2.8")
	byAddr := AddrKey(addr, 64)
	for _, tc := range []struct {
		name string
		id   Identity
		r    req
		// same: requests with r from addr and other have the same key
		// (named by the field); addr: the key is the address's.
		same, addr bool
	}{
		{"address", Identity{}, req{}, false, true},
		{"header", Identity{From: FromHeader, Name: "X-Api-Key"}, req{h: map[string]string{"x-api-key": "k1"}}, true, false},
		{"header absent", Identity{From: FromHeader, Name: "X-Api-Key"}, req{}, false, true},
		{"cookie", Identity{From: FromCookie, Name: "session"}, req{c: map[string]string{"session": "s1"}}, true, false},
		{"cookie absent", Identity{From: FromCookie, Name: "session"}, req{c: map[string]string{"other": "s1"}}, false, true},
		{"claim", Identity{From: FromJWTClaim, Name: "sub"}, req{h: map[string]string{"Authorization": jwt(`{"iss":"x","sub":"alice"}`)}}, true, false},
		{"claim absent", Identity{From: FromJWTClaim, Name: "sub"}, req{h: map[string]string{"Authorization": jwt(`{"iss":"x"}`)}}, false, true},
		{"claim not bearer", Identity{From: FromJWTClaim, Name: "sub"}, req{h: map[string]string{"Authorization": "Basic YWxpY2U6eA=="}}, false, true},
		{"claim garbage", Identity{From: FromJWTClaim, Name: "sub"}, req{h: map[string]string{"Authorization": "Bearer a.!!!.c"}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k1, k2 := tc.id.Key(tc.r, addr), tc.id.Key(tc.r, other)
			if (k1 == k2) != tc.same {
				t.Errorf("same key from two addresses %v, want %v", k1 == k2, tc.same)
			}
			if (k1 == byAddr) != tc.addr {
				t.Errorf("named by the address %v, want %v", k1 == byAddr, tc.addr)
			}
		})
	}
	// The same value in a header, a cookie and a claim names three
	// different clients (namespaces), and two values two clients.
	h := Identity{From: FromHeader, Name: "X"}
	c := Identity{From: FromCookie, Name: "X"}
	kh := h.Key(req{h: map[string]string{"X": "v"}}, addr)
	kc := c.Key(req{c: map[string]string{"X": "v"}}, addr)
	kh2 := h.Key(req{h: map[string]string{"X": "w"}}, addr)
	if kh == kc || kh == kh2 {
		t.Errorf("header v %x, cookie v %x, header w %x: want three keys", kh, kc, kh2)
	}
}

func TestJWTClaim(t *testing.T) {
	var buf [maxPayload]byte
	for _, tc := range []struct {
		payload, claim, want string
	}{
		{`{"sub":"alice"}`, "sub", "alice"},
		{` { "a" : {"sub":"inner","x":[1,"}"]} , "sub" : "outer" } `, "sub", "outer"}, // nested objects skipped
		{`{"a":"q\"sub\":","sub":"bob"}`, "sub", "bob"},                               // an escaped quote in a string
		{`{"uid":42,"x":true}`, "uid", "42"},
		{`{"tenant":{"id":7}}`, "tenant", `{"id":7}`},
		{`{"sub":"alice"}`, "aud", ""},
		{`{"sub":"alice"`, "aud", ""}, // truncated
		{`["sub","alice"]`, "sub", ""},
	} {
		got := jwtClaim([]byte(jwt(tc.payload)), tc.claim, buf[:])
		if string(got) != tc.want {
			t.Errorf("%s claim %q = %q, want %q", tc.payload, tc.claim, got, tc.want)
		}
	}
	// A payload larger than the buffer names no one (the address does).
	big := `{"pad":"` + strings.Repeat("x", maxPayload) + `","sub":"alice"}`
	if got := jwtClaim([]byte(jwt(big)), "sub", buf[:]); got != nil {
		t.Errorf("an oversized payload gave %q", got)
	}
	// A padded payload (=) is accepted.
	p := base64.URLEncoding.EncodeToString([]byte(`{"sub":"al"}`))
	if got := jwtClaim([]byte("bearer h."+p+".s"), "sub", buf[:]); string(got) != "al" {
		t.Errorf("padded payload: %q", got)
	}
}

// rawReq is a classify.Request that returns stored bytes (the engines'
// views do not allocate either).
type rawReq struct{ auth, key []byte }

func (r *rawReq) Method() []byte { return nil }
func (r *rawReq) Path() []byte   { return nil }
func (r *rawReq) Host() []byte   { return nil }
func (r *rawReq) Peek(name string) []byte {
	if name == "Authorization" {
		return r.auth
	}
	return r.key
}
func (r *rawReq) Cookie(string) []byte { return r.key }

func TestKeyAllocs(t *testing.T) {
	addr := netip.MustParseAddr("2001:db8::1")
	r := &rawReq{auth: []byte(jwt(`{"iss":"x","sub":"alice"}`)), key: []byte("k")}
	for _, id := range []Identity{{}, {From: FromHeader, Name: "X-Api-Key"}, {From: FromCookie, Name: "s"}, {From: FromJWTClaim, Name: "sub"}} {
		if n := testing.AllocsPerRun(100, func() { id.Key(r, addr) }); n != 0 {
			t.Errorf("%v: %v allocs per Key", id.From, n)
		}
	}
}

func TestParseSource(t *testing.T) {
	for _, s := range []Source{FromAddress, FromHeader, FromCookie, FromJWTClaim} {
		got, err := ParseSource(s.String())
		if err != nil || got != s {
			t.Errorf("%v: %v, %v", s, got, err)
		}
	}
	if _, err := ParseSource("ip"); err == nil {
		t.Error("ParseSource(ip) did not fail")
	}
}
