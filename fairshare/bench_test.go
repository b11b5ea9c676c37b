package fairshare

import (
	"net/netip"
	"testing"

	"github.com/sentry-proxy/sentry/admission"
)

// BenchmarkKeyAddress is the client key of a request named by its address.
func BenchmarkKeyAddress(b *testing.B) {
	var id Identity
	addr := netip.MustParseAddr("192.0.2.7")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if id.Key(nil, addr) == 0 {
			b.Fatal("no key")
		}
	}
}

// BenchmarkShareDone is the table's per-request work: the entry's lookup
// and standing, and the decision counted.
func BenchmarkShareDone(b *testing.B) {
	tb, _ := New(Config{Classes: []string{"web"}})
	addr := netip.MustParseAddr("192.0.2.7")
	k := AddrKey(addr, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, sh, _ := tb.Share(0, k, addr)
		tb.Done(s, sh, admission.RejectTest)
	}
}
