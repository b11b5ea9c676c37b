package pipeline

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/fairshare"
)

// reqController records the admission request it is asked.
type reqController struct {
	modeController
	req admission.Request
}

func (c *reqController) Park(r *admission.Request, _ admission.Waker) (admission.Decision, admission.Pending, bool) {
	c.req = *r
	return c.d, nil, true
}

type hdrReq struct{ key []byte }

func (r hdrReq) Method() []byte            { return nil }
func (r hdrReq) Path() []byte              { return nil }
func (r hdrReq) Host() []byte              { return nil }
func (r hdrReq) Peek(string) []byte        { return r.key }
func (r hdrReq) Cookie(name string) []byte { return nil }

var _ classify.Request = hdrReq{}

// TestDecideClientKey: with fair sharing on, Decide names the client by
// the address it is given (the engines' address after trusted_proxies:
// behind a trusted proxy, X-Forwarded-For's) or by the app's header; off,
// the request has no client and stays outside fair sharing.
func TestDecideClientKey(t *testing.T) {
	proxy := netip.MustParseAddr("10.0.0.1")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	c1 := ClientFromXFF(trusted, proxy, []byte("192.0.2.1"))
	c2 := ClientFromXFF(trusted, proxy, []byte("192.0.2.2"))
	if c1 == proxy || c1 == c2 {
		t.Fatalf("X-Forwarded-For from a trusted proxy: %v, %v", c1, c2)
	}
	byAddr := &fairshare.Identity{IPv6Prefix: 64}
	byHeader := &fairshare.Identity{From: fairshare.FromHeader, Name: "X-Api-Key"}
	key := func(id *fairshare.Identity, v classify.Request, client netip.Addr) (uint64, netip.Addr) {
		c := &reqController{modeController: modeController{d: admission.Decision{Verdict: admission.Admit}}}
		a := &App{Controller: c, Client: id}
		var tk Ticket
		a.Decide(&tk, v, client, time.Unix(1, 0), nil, false, nil)
		return c.req.Client, c.req.Addr
	}
	k1, addr := key(byAddr, nil, c1)
	k2, _ := key(byAddr, nil, c2)
	if k1 == 0 || k1 == k2 || addr != c1 || k1 != fairshare.AddrKey(c1, 64) {
		t.Errorf("by address: %x (%v), %x; want two keys, the address's", k1, addr, k2)
	}
	h1, _ := key(byHeader, hdrReq{[]byte("key-1")}, c1)
	h2, _ := key(byHeader, hdrReq{[]byte("key-1")}, c2)
	if h1 != h2 || h1 == k1 {
		t.Errorf("by header: %x from one address, %x from another; want one client", h1, h2)
	}
	if k, _ := key(nil, nil, c1); k != 0 {
		t.Errorf("fair sharing off: client %x, want 0", k)
	}
}

// TestOverShareReason: a request shed for fair share is logged with the
// reason and verdict over_share.
func TestOverShareReason(t *testing.T) {
	e := AccessEntry{Outcome: OutRejected, Asked: true, Verdict: admission.RejectOverShare}
	if e.Reason() != "over_share" || e.VerdictName() != "over_share" {
		t.Errorf("reason %q, verdict %q, want over_share", e.Reason(), e.VerdictName())
	}
}
