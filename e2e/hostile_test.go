package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
)

// TestSlowUploadsDoNotPoison is the first attack of the hostile-client
// report, end to end through the real admission stack: after 20 normal
// requests to a path, n clients upload to the same path slowly (about
// 1.2 KiB/s, above body_min_rate, each taking ~2.5 s). The farm sends no
// Server-Timing, so proxy-measured times are the estimator's only source:
// the worst case. Normal requests of the same path and class must be
// admitted at ≥ 95% during the attack and ≥ 99% in the 5 s after it, and
// the path's estimate must stay near the truth.
//
// 3 and 30 uploads run always; SENTRY_POISON_300=1 adds 300.
func TestSlowUploadsDoNotPoison(t *testing.T) {
	counts := []int{3, 30}
	if os.Getenv("SENTRY_POISON_300") != "" {
		counts = append(counts, 300)
	}
	for _, n := range counts {
		t.Run(fmt.Sprint(n), func(t *testing.T) { slowUploads(t, n) })
	}
}

func slowUploads(t *testing.T, n int) {
	const service = 10 * time.Millisecond
	f, err := farm.Start(farm.Config{Servers: 2, Slots: 8, Seed: 3, NoServerTiming: true,
		Routes: []farm.Route{{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Fixed, Mean: service}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := startInproc(t, policyFor(freePort(t), f.Addrs(), `    sla: {targets: [{target: 100ms}]}
    admission: {mode: batch}
`))
	base := "http://" + s.addr
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	post := func() int {
		resp, err := client.Post(base+"/upload/doc", "text/plain", strings.NewReader(strings.Repeat("x", 100)))
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < 20; i++ {
		if st := post(); st != 200 {
			t.Fatalf("warm-up request %d: %d", i, st)
		}
	}

	// The attack: n slow uploads of 3,000 bytes in 100-byte pieces every
	// 80 ms (~1.2 KiB/s, ~2.4 s each).
	const size, piece, every = 3000, 100, 80 * time.Millisecond
	var wg sync.WaitGroup
	attackStatus := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
			if err != nil {
				attackStatus <- "dial: " + err.Error()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST /upload/doc HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
			for sent := 0; sent < size; sent += piece {
				time.Sleep(every)
				if _, err := c.Write([]byte(strings.Repeat("y", piece))); err != nil {
					attackStatus <- "write: " + err.Error()
					return
				}
			}
			buf := make([]byte, 64)
			k, _ := io.ReadAtLeast(c, buf, 12)
			attackStatus <- string(buf[:k])
		}()
	}
	attackDone := make(chan struct{})
	go func() { wg.Wait(); close(attackDone) }()

	during, duringOK := 0, 0
	for running := true; running; {
		select {
		case <-attackDone:
			running = false
		default:
			during++
			if post() == 200 {
				duringOK++
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(attackStatus)
	ends := map[string]int{}
	for st := range attackStatus {
		if i := strings.Index(st, "\r"); i > 0 {
			st = st[:i]
		}
		ends[st]++
	}
	// The uploads themselves are ordinary requests once their bodies are in:
	// admitted or, when they all finish at once, partly rejected.
	t.Logf("the uploads ended with %v", ends)
	after, afterOK := 0, 0
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		after++
		if post() == 200 {
			afterOK++
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, ok := s.m.Estimators().Lookup("shop").Stats(0, []byte("/upload/doc"))
	t.Logf("%d slow uploads: normal requests admitted %d/%d during, %d/%d in the 5 s after; estimate %v (true %v)",
		n, duringOK, during, afterOK, after, st.Mean.Round(time.Microsecond), service)
	if during > 0 && float64(duringOK) < 0.95*float64(during) {
		t.Errorf("during the attack %d of %d normal requests admitted, want ≥ 95%%", duringOK, during)
	}
	if float64(afterOK) < 0.99*float64(after) {
		t.Errorf("after the attack %d of %d normal requests admitted, want ≥ 99%%", afterOK, after)
	}
	if !ok || st.Mean > 4*service {
		t.Errorf("the path's estimate is %v (known %v), want near %v", st.Mean, ok, service)
	}
}
