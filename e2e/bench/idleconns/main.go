// Command idleconns opens N keep-alive client connections to a proxy,
// makes one request on each, reads its whole response and then leaves
// every connection open and idle, for e2e/bench/idle.sh, which reads the
// proxy's memory before and after.
//
// Two protocols:
//
//   - h1: plain HTTP/1.1, "GET / HTTP/1.1" with a Host and nothing else;
//     the response is read to the end of its Content-Length body.
//   - h2: HTTP/2 over TLS (ALPN h2, the certificate not checked): the
//     preface, an empty SETTINGS, one GET on stream 1, read until the
//     stream ends, the server's SETTINGS acknowledged.
//
// A connection that fails, or whose response is not a 200, counts as
// failed; the command prints "ready OPEN FAILED" on stdout once every
// connection has been tried, then holds them open until its stdin closes,
// a SIGTERM or SIGINT comes, or -hold passes, and exits. Dials are
// bounded (-c at once, -timeout each), so the whole run is bounded.
//
// Usage:
//
//	idleconns -addr 127.0.0.1:18281 -n 9000 -proto h1 -hold 120s
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18281", "the proxy's `host:port`")
	n := flag.Int("n", 9000, "connections to open")
	conc := flag.Int("c", 64, "connections being opened at once")
	proto := flag.String("proto", "h1", "h1 (plain HTTP/1.1) or h2 (HTTP/2 over TLS)")
	timeout := flag.Duration("timeout", 10*time.Second, "bound on each connection's dial, handshake and request")
	hold := flag.Duration("hold", 120*time.Second, "longest time the idle connections are held")
	flag.Parse()
	if *n < 1 || *conc < 1 || (*proto != "h1" && *proto != "h2") {
		fmt.Fprintln(os.Stderr, "idleconns: -n and -c must be positive, -proto h1 or h2")
		os.Exit(2)
	}

	conns := make([]net.Conn, *n)
	var failed atomic.Int64
	var firstErr atomic.Value
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= *n {
					return
				}
				c, err := open(*addr, *proto, *timeout)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	f := failed.Load()
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(os.Stderr, "idleconns: %d connections failed, the first: %s\n", f, e)
	}
	fmt.Printf("ready %d %d\n", int64(*n)-f, f)

	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	case <-time.After(*hold):
	}
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

// open dials addr, makes one request and reads its response; the
// connection is returned idle.
func open(addr, proto string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if proto == "h2" {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err = tc.Handshake(); err == nil && tc.ConnectionState().NegotiatedProtocol != "h2" {
			err = errors.New("h2 not negotiated")
		}
		if err == nil {
			err = h2Request(tc, addr)
		}
		c = tc
	} else {
		err = h1Request(c, addr)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func h1Request(c net.Conn, host string) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || resp.Close {
		return fmt.Errorf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	if br.Buffered() > 0 {
		return errors.New("bytes after the response")
	}
	return nil
}

func h2Request(c net.Conn, host string) error {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return err
	}
	dec := hpack.NewDecoder(4096, nil)
	status := ""
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return err
				}
			}
		case *http2.HeadersFrame:
			fs, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				return err
			}
			for _, hf := range fs {
				if hf.Name == ":status" {
					status = hf.Value
				}
			}
			if f.StreamEnded() {
				return h2Status(status)
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return h2Status(status)
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY: %v", f.ErrCode)
		}
	}
}

func h2Status(s string) error {
	if s != "200" {
		return fmt.Errorf("status %q", s)
	}
	return nil
}
