package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/policy"
	"github.com/sentry-proxy/sentry/sim/dns"
)

// TestDNSBackendsAskTheConfiguredServer: with backends.dns.server set,
// the pool's name is looked up at that server (not the system's), and the
// pool follows its records: when the name moves from 127.0.0.1 to
// 127.0.0.2, requests move with it.
func TestDNSBackendsAskTheConfiguredServer(t *testing.T) {
	serve := func(host string, port int, name string) (int, error) {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return 0, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port, nil
	}
	port, err := serve("127.0.0.1", 0, "one")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serve("127.0.0.2", port, "two"); err != nil {
		t.Skipf("cannot listen on 127.0.0.2:%d: %v", port, err)
	}
	ns, err := dns.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const name = "farm.proxy.test"
	ns.Set(name, netip.MustParseAddr("127.0.0.1"))
	h := startProxy(t, nil, func(_ *policy.Snapshot, a *policy.App) {
		a.Backends = policy.Backends{DNS: &policy.DNS{Name: name, Port: uint16(port), Interval: 50 * time.Millisecond, Server: ns.Addr()}}
	})
	get := func() string {
		resp, err := http.Get(h.url("/"))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	waitFor := func(want string) {
		t.Helper()
		var got string
		for i := 0; i < 200; i++ {
			if got = get(); got == want {
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		t.Fatalf("got %q, want %q", got, want)
	}
	waitFor("200 one")
	ns.Set(name, netip.MustParseAddr("127.0.0.2"))
	waitFor("200 two")
	if ns.Queries() == 0 {
		t.Fatal("the configured DNS server was never asked")
	}
}
