package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fillPipe writes into w until the pipe is full (nothing reads r), so the
// next write to it blocks: a reader that stopped reading.
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	fd := int(w.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for i := range chunk {
		chunk[i] = '.'
	}
	chunk[len(chunk)-1] = '\n'
	for n := 0; n < 1<<30; {
		k, err := unix.Write(fd, chunk)
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	if err := unix.SetNonblock(fd, false); err != nil { // as a real stdout is
		t.Fatal(err)
	}
}

// metricSum sums the samples of name whose labels match re in the
// exposition text.
func metricSum(text, name, re string) float64 {
	var sum float64
	for _, m := range regexp.MustCompile(`(?m)^`+name+`(\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(text, -1) {
		if ok, _ := regexp.MatchString(re, m[1]); !ok {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}

// TestStuckLogReaderKeepsServing is issue 29's fourth outage with the real
// binary: the access log (every line, rate 0) goes to a reader that has
// stopped reading -- a full pipe on stdout (sentry's own log on stderr
// too, the same pipe), or a FIFO whose reader never reads. Sentry must
// answer every request, count the lines it drops, show the stalled writer
// in its metrics, keep /healthz at 200, and still stop on SIGTERM.
// 6,000 requests: more lines than the writer's 1 MiB buffer and the pipe
// hold, so lines are dropped.
func TestStuckLogReaderKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("6,000 requests per case")
	}
	for _, fifo := range []bool{false, true} {
		name := "stdout-pipe"
		if fifo {
			name = "fifo"
		}
		t.Run(name, func(t *testing.T) {
			b := newTestBackend(t, "ok", 0)
			listen, admin := freePort(t), freePort(t)
			output := "stdout"
			cmd := exec.Command(sentryBin, "run", "-config", "POLICY")
			out := newSyncBuffer()
			if fifo {
				output = filepath.Join(t.TempDir(), "access.fifo")
				if err := unix.Mkfifo(output, 0o600); err != nil {
					t.Fatal(err)
				}
				// A reader that opens the FIFO (so sentry's open does not
				// wait for one) and never reads.
				fd, err := unix.Open(output, unix.O_RDONLY|unix.O_NONBLOCK, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unix.Close(fd) })
				cmd.Stdout, cmd.Stderr = out, out
			} else {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(); w.Close() })
				fillPipe(t, w)
				cmd.Stdout, cmd.Stderr = w, w // never read: r stays open, unread
			}
			cfg := writeFile(t, "stuck.yaml", fmt.Sprintf(`
admin: {listen: %q}
log:
  access: {enabled: true, output: %q, rate: 0, reject_rate: 0}
apps:
  - name: web
    listen: %q
    backends: {static: [%q]}
    admission: {mode: "off"}
`, admin, output, listen, b.addr))
			cmd.Args[len(cmd.Args)-1] = cfg
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{}) // closed when the process is reaped
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(exited) }()
			t.Cleanup(func() {
				select {
				case <-exited:
				default:
					cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					t.Logf("sentry output:\n%s", out.String())
				}
			})
			waitHTTP(t, "http://"+admin+"/readyz", 10*time.Second)

			const n, workers = 6000, 8
			var answered, failed atomic.Int64
			var firstErr atomic.Value
			start := time.Now()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &http.Client{Timeout: 5 * time.Second}
					for i := w; i < n; i += workers {
						resp, err := c.Get("http://" + listen + "/item/" + strconv.Itoa(i))
						if err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
							continue
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == 200 {
							answered.Add(1)
						} else {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, resp.Status)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			if answered.Load() != n {
				t.Fatalf("%d of %d requests answered 200 (%d failed, first: %v) in %v with the log reader stuck",
					answered.Load(), n, failed.Load(), firstErr.Load(), elapsed)
			}
			// A generous bound: this is no speed measurement, only proof
			// that nothing waited for the log.
			if elapsed > 60*time.Second {
				t.Fatalf("%d requests took %v", n, elapsed)
			}
			if h := b.hits.Load(); h != n {
				t.Fatalf("backend saw %d requests, want %d", h, n)
			}
			if code, body := get(t, "http://"+admin+"/healthz"); code != 200 {
				t.Fatalf("/healthz %d %q with a stuck log reader: serving is fine", code, body)
			}
			_, m := get(t, "http://"+admin+"/metrics")
			logged := metricSum(m, "sentry_access_log_lines_total", ``)
			full := metricSum(m, "sentry_access_log_dropped_total", `reason="buffer_full"`)
			sampled := metricSum(m, "sentry_access_log_dropped_total", `reason="sampled"`)
			if full == 0 || sampled != 0 || logged+full != n {
				t.Fatalf("access log: %v lines logged, %v dropped buffer_full, %v sampled; want drops for a full buffer and %d in all", logged, full, sampled, n)
			}
			if s := metricSum(m, "sentry_log_output_stalled_seconds", `log="access"`); s <= 0 {
				t.Fatalf("sentry_log_output_stalled_seconds{log=access} = %v, want the stuck write's age", s)
			}
			if !fifo {
				if s := metricSum(m, "sentry_log_output_stalled_seconds", `log="process"`); s <= 0 {
					t.Fatalf("sentry_log_output_stalled_seconds{log=process} = %v: stderr is the stuck pipe too", s)
				}
			}
			if fifo {
				// SIGUSR1 reopens the FIFO while the old write is stuck.
				cmd.Process.Signal(syscall.SIGUSR1)
				time.Sleep(200 * time.Millisecond)
				if code, _ := get(t, "http://"+listen+"/after-usr1"); code != 200 {
					t.Fatalf("after SIGUSR1: %d", code)
				}
			}
			// A graceful stop still ends: the flush gives up after its bound.
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if waitErr != nil {
					t.Fatalf("sentry exited with %v after SIGTERM", waitErr)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("sentry did not exit within 20s of SIGTERM with its log reader stuck")
			}
		})
	}
}
