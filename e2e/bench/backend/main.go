// Command backend is the trivial origin server used by e2e/bench/peers.sh.
//
// It answers every request, whatever its method or path (including
// /healthz), with 200 and the same fixed 128-byte text body, on keep-alive
// connections. Nothing is logged per request, so the backend costs as
// little CPU as fasthttp allows and every proxy under test is measured in
// front of the same origin.
//
// Usage:
//
//	backend -listen 127.0.0.1:18080
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/valyala/fasthttp"
)

// bodySize is the length of every response body, in bytes.
const bodySize = 128

// body is the fixed response: a recognisable prefix padded with 'x' and
// ending in a newline, exactly bodySize bytes long.
var body = func() []byte {
	b := []byte("sentry bench backend ")
	b = append(b, bytes.Repeat([]byte("x"), bodySize-len(b)-1)...)
	return append(b, '\n')
}()

var contentType = []byte("text/plain; charset=utf-8")

func handle(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentTypeBytes(contentType)
	ctx.Response.SetBodyRaw(body)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18080", "listen `ADDR` (host:port)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "backend: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if len(body) != bodySize {
		panic("backend: body is not bodySize bytes")
	}

	s := &fasthttp.Server{
		Handler:                       handle,
		Name:                          "bench-backend",
		NoDefaultDate:                 true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: true,
		Concurrency:                   1 << 16,
	}
	errc := make(chan error, 1)
	go func() { errc <- s.ListenAndServe(*listen) }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		log.Fatalf("backend: %v", err)
	case <-sig:
		_ = s.Shutdown()
	}
}
