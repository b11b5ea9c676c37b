package proxy

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sentry-proxy/sentry/policy"
)

// TestH2WriteTimeoutCutsStuckClient: an h2 client that opens its flow
// control windows wide, asks for a large response and stops reading is
// cut once no byte has left for server.write_timeout (applied by the h2
// server's writer, ownConn.writeAll): its connection ends long before the
// response does.
func TestH2WriteTimeoutCutsStuckClient(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 16<<20)
	be := backend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.Write(big)
	})
	cf, kf := writeTestCert(t)
	h := startProxy(t, []string{be}, func(s *policy.Snapshot, a *policy.App) {
		a.TLS = &policy.TLS{CertFile: cf, KeyFile: kf}
		s.Server.WriteTimeout = 300 * time.Millisecond
	})
	raw, err := net.DialTimeout("tcp", h.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.(*net.TCPConn).SetReadBuffer(4 << 10)
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q", p)
	}
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	fr.WriteWindowUpdate(0, 1<<31-1-65535)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/big"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// Read nothing: the proxy's writes stall, and it must close the
	// connection by itself (the client's kernel would go on taking the
	// bytes the proxy's kernel still holds, slowly, through its small
	// window: the proxy's side is what is asserted).
	fe := h.p.mu.fronts[h.addr]
	live := func() int {
		// The TLS listener's (goroutine h2) and the loops' (h2 on the
		// event loops, h2loop_linux.go).
		return fe.tls.liveCount() + fe.heldElsewhere()
	}
	sent := time.Now()
	for live() > 0 {
		if time.Since(sent) > 5*time.Second {
			t.Fatalf("the h2 connection of a client that reads nothing is still served %v later (write_timeout 300ms)", time.Since(sent))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("closed %v after the request", time.Since(sent).Round(time.Millisecond))
	if time.Since(sent) < 300*time.Millisecond {
		t.Errorf("closed after %v, before write_timeout could have passed", time.Since(sent))
	}
}
