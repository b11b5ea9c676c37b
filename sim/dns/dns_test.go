package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// resolverFor is Go's resolver sending every query to s, as sentry's
// backends.dns.server does.
func resolverFor(s *Server, network string) *net.Resolver {
	var d net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, s.Addr())
	}}
}

func lookup(t *testing.T, r *net.Resolver, name string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := r.LookupHost(ctx, name)
	slices.Sort(got)
	return got, err
}

func TestServerFollowsSet(t *testing.T) {
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			r := resolverFor(s, network)
			s.Set("Farm.Sentry.Test", netip.MustParseAddr("127.0.0.11"), netip.MustParseAddr("::1"))
			got, err := lookup(t, r, "farm.sentry.test")
			if err != nil || !slices.Equal(got, []string{"127.0.0.11", "::1"}) {
				t.Fatalf("lookup = %v, %v; want [127.0.0.11 ::1]", got, err)
			}
			s.Set("farm.sentry.test.", netip.MustParseAddr("127.0.0.12"), netip.MustParseAddr("127.0.0.13"))
			got, err = lookup(t, r, "farm.sentry.test")
			if err != nil || !slices.Equal(got, []string{"127.0.0.12", "127.0.0.13"}) {
				t.Fatalf("after Set: lookup = %v, %v", got, err)
			}
			// A name with no addresses exists but has none: Go reports "no
			// such host" too, but not as NXDOMAIN from the server's side;
			// both are errors for the pool, which keeps its members.
			s.Set("farm.sentry.test")
			if got, err := lookup(t, r, "farm.sentry.test"); err == nil {
				t.Fatalf("empty name: lookup = %v, want an error", got)
			}
			var de *net.DNSError
			if _, err := lookup(t, r, "other.sentry.test"); !errors.As(err, &de) || !de.IsNotFound {
				t.Fatalf("unknown name: err = %v, want not found", err)
			}
		})
	}
	if s.Queries() == 0 {
		t.Fatal("no queries counted")
	}
}

// TestServerTruncatesLargeAnswers: 100 A records do not fit in 512 bytes
// of UDP; the client is told so and asks again over TCP, and gets them all.
func TestServerTruncatesLargeAnswers(t *testing.T) {
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var addrs []netip.Addr
	var want []string
	for i := range 100 {
		a := netip.MustParseAddr(fmt.Sprintf("127.0.1.%d", i+1))
		addrs = append(addrs, a)
		want = append(want, a.String())
	}
	slices.Sort(want)
	s.Set("big.sentry.test", addrs...)
	var d net.Dialer
	tcpAsked := false
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if network == "tcp" {
			tcpAsked = true
		}
		return d.DialContext(ctx, network, s.Addr())
	}}
	got, err := lookup(t, r, "big.sentry.test")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("lookup: %d addresses, %v; want 100", len(got), err)
	}
	if !tcpAsked {
		t.Error("the resolver never fell back to TCP: the UDP answer was not truncated")
	}
}

func TestCloseStopsServing(t *testing.T) {
	s, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Set("a.sentry.test", netip.MustParseAddr("127.0.0.1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err == nil {
		c.Close()
		t.Fatal("TCP still accepts after Close")
	}
}
