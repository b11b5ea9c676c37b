// Command grpcload is the gRPC unary load client, and the echo backend,
// of e2e/bench/grpc.sh: grpc-go on both sides, no generated code (a
// raw-bytes codec (internal/grpcraw) and a hand-written service description, as in
// proxy/grpc_test.go), plain HTTP/2 with prior knowledge (insecure
// credentials).
//
// Server mode answers /bench.Echo/Unary with a fixed 128-byte message:
//
//	grpcload -serve 127.0.0.1:18190
//
// Load mode opens -conns client connections and keeps -streams unary
// calls in flight on each, closed loop, for -warmup then -duration
// seconds; only calls that end within the measured window count:
//
//	grpcload -addr 127.0.0.1:18191 -conns 16 -streams 10 -duration 10s
//
// It prints one line of key=value fields (rps, p50_ms, p99_ms, ok, errors,
// and the first error seen) and exits 1 if no call succeeded. Every loop
// is bounded by the duration; each call has a 5 s deadline.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/internal/grpcraw"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const method = "/bench.Echo/Unary"

// reply is every answer: 128 bytes, as e2e/bench/backend's body.
var reply = func() []byte {
	b := []byte("sentry grpc bench backend ")
	for len(b) < 127 {
		b = append(b, 'x')
	}
	return append(b, '\n')
}()

var echoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			out := reply
			return &out, nil
		},
	}},
}

func main() {
	serve := flag.String("serve", "", "serve the echo backend on this address (server mode)")
	addr := flag.String("addr", "", "target host:port (load mode)")
	conns := flag.Int("conns", 16, "client connections")
	streams := flag.Int("streams", 10, "concurrent calls per connection")
	duration := flag.Duration("duration", 10*time.Second, "measured time")
	warmup := flag.Duration("warmup", time.Second, "time before measuring")
	size := flag.Int("size", 128, "request message size, bytes")
	flag.Parse()
	switch {
	case *serve != "":
		runServer(*serve)
	case *addr != "":
		if *conns < 1 || *streams < 1 || *duration <= 0 || *warmup < 0 || *size < 0 {
			log.Fatal("grpcload: -conns and -streams must be ≥ 1, -duration > 0, -warmup and -size ≥ 0")
		}
		if !runLoad(*addr, *conns, *streams, *size, *warmup, *duration) {
			os.Exit(1)
		}
	default:
		log.Fatal("grpcload: give -serve ADDR or -addr ADDR")
	}
}

func runServer(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(grpcraw.Codec{}), grpc.MaxConcurrentStreams(1000))
	s.RegisterService(&echoDesc, struct{}{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; s.Stop() }()
	log.Printf("grpcload: serving %s on %s (h2c)", method, addr)
	if err := s.Serve(ln); err != nil {
		log.Fatal(err)
	}
}

// worker is one closed-loop caller: its latencies (ns) of calls that
// ended in the measured window, and its failures there.
type worker struct {
	lat    []int64
	errors int
}

func runLoad(addr string, conns, streams, size int, warmup, duration time.Duration) bool {
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	ccs := make([]*grpc.ClientConn, conns)
	for i := range ccs {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(grpcraw.Codec{})))
		if err != nil {
			log.Fatal(err)
		}
		cc.Connect()
		defer cc.Close()
		ccs[i] = cc
	}
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	var firstErr atomic.Value
	workers := make([]*worker, conns*streams)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{lat: make([]int64, 0, 1<<14)}
		workers[i] = w
		cc := ccs[i%conns]
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, out := msg, []byte(nil)
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := cc.Invoke(ctx, method, &in, &out)
				cancel()
				t1 := time.Now()
				if t1.Before(measureFrom) || t1.After(end) {
					continue
				}
				if err != nil {
					w.errors++
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%v: %s", status.Code(err), status.Convert(err).Message()))
					continue
				}
				w.lat = append(w.lat, t1.Sub(t0).Nanoseconds())
			}
		}()
	}
	wg.Wait()
	var all []int64
	errs := 0
	for _, w := range workers {
		all = append(all, w.lat...)
		errs += w.errors
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := int(float64(len(all))*p) - 1
		i = max(0, min(i, len(all)-1))
		return float64(all[i]) / 1e6
	}
	first, _ := firstErr.Load().(string)
	fmt.Printf("rps=%.0f p50_ms=%.3f p99_ms=%.3f ok=%d errors=%d conns=%d streams=%d duration_s=%.0f first_error=%q\n",
		float64(len(all))/duration.Seconds(), pct(0.50), pct(0.99), len(all), errs, conns, streams, duration.Seconds(), first)
	return len(all) > 0
}
