package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const nghttp2Install = "apt-get install nghttp2-client"

// TestH2loadHeaderTableSize: h2load with --header-table-size 0, 1024 and
// 4095 (the client shrinks the table sentry's HPACK encoder may use, so
// sentry must open its next header block with a dynamic table size
// update, RFC 7541 §4.2), and 65536 (larger than the default: nothing to
// signal), gets every one of its requests answered 2xx, on each front
// end.
func TestH2loadHeaderTableSize(t *testing.T) {
	bin := tool(t, "", nghttp2Install, "h2load")
	be := echoBackend(t)
	for _, f := range fronts {
		t.Run(f.String(), func(t *testing.T) {
			s := startSentry(t, f, be, appOpts{})
			s.checkDriver(t)
			for _, size := range []int{0, 1024, 4095, 65536} {
				t.Run(strconv.Itoa(size), func(t *testing.T) {
					const n = 200
					args := []string{"-n", strconv.Itoa(n), "-c", "2", "-m", "10", "--header-table-size=" + strconv.Itoa(size), s.url("/")}
					stdout, stderr, err := run(t, time.Minute, "", bin, args...)
					r, perr := parseH2load(stdout)
					if perr != nil {
						t.Fatalf("h2load %s: %v (exit: %v)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), perr, err, tail(stdout, 3000), tail(stderr, 3000))
					}
					if r.succeeded != n || r.status2xx != n {
						t.Errorf("h2load --header-table-size=%d: %d of %d requests succeeded, %d answered 2xx (%d failed, %d errored, %d timed out)\n%s",
							size, r.succeeded, n, r.status2xx, r.failed, r.errored, r.timeout, tail(stdout, 3000))
					}
				})
			}
		})
	}
}

type h2loadResult struct {
	succeeded, failed, errored, timeout, status2xx int
}

var (
	h2loadRequests = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2loadStatus   = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
)

func parseH2load(out string) (h2loadResult, error) {
	var r h2loadResult
	m := h2loadRequests.FindStringSubmatch(out)
	s := h2loadStatus.FindStringSubmatch(out)
	if m == nil || s == nil {
		return r, fmt.Errorf("no summary in h2load's output")
	}
	atoi := func(v string) int { n, _ := strconv.Atoi(v); return n }
	r.succeeded, r.failed, r.errored, r.timeout = atoi(m[4]), atoi(m[5]), atoi(m[6]), atoi(m[7])
	r.status2xx = atoi(s[1])
	return r, nil
}

// TestNghttpSmallWindow: nghttp with 1 KiB windows (-w 10 -W 10: the
// stream's and the connection's initial window 2^10-1), on each front end:
//   - three responses at once, 1 byte to 256 KiB, sharing the
//     connection's window: each stream's bytes all arrive (nghttp writes
//     the streams' data to stdout as it comes, interleaved, so each
//     response is one letter repeated and the letters are counted);
//   - one 256 KiB response of varied bytes: every byte arrives, in order;
//   - a 128 KiB upload: the backend's echo says it arrived whole.
func TestNghttpSmallWindow(t *testing.T) {
	bin := tool(t, "", nghttp2Install, "nghttp")
	be := echoBackend(t)
	fills := map[byte]int{'a': 1, 'b': 100000, 'c': 262144}
	up := pattern(128 << 10)
	upFile := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(upFile, up, 0o644); err != nil {
		t.Fatal(err)
	}
	small := []string{"-w", "10", "-W", "10", "-t", "30"}
	for _, f := range fronts {
		t.Run(f.String(), func(t *testing.T) {
			s := startSentry(t, f, be, appOpts{})
			s.checkDriver(t)
			args := append([]string(nil), small...)
			want := 0
			for c, n := range fills {
				args = append(args, s.url(fmt.Sprintf("/fill/%c/%d", c, n)))
				want += n
			}
			stdout, stderr, err := run(t, time.Minute, "", bin, args...)
			if err != nil {
				t.Errorf("nghttp %s: %v\nstderr:\n%s", strings.Join(args, " "), err, tail(stderr, 2000))
			}
			for c, n := range fills {
				if got := strings.Count(stdout, string(c)); got != n {
					t.Errorf("three streams at once, 1 KiB windows: stream of %c got %d bytes of %d", c, got, n)
				}
			}
			if len(stdout) != want {
				t.Errorf("three streams at once, 1 KiB windows: %d bytes in all, want %d", len(stdout), want)
			}

			const big = 262144
			args = append(append([]string(nil), small...), s.url("/bytes/"+strconv.Itoa(big)))
			stdout, stderr, err = run(t, time.Minute, "", bin, args...)
			if err != nil || stdout != string(pattern(big)) {
				t.Errorf("GET /bytes/%d with 1 KiB windows: %d bytes (%v), not the %d sent in order\nstderr:\n%s", big, len(stdout), err, big, tail(stderr, 2000))
			}

			args = append(append([]string(nil), small...), "-d", upFile, s.url("/echo"))
			stdout, stderr, err = run(t, time.Minute, "", bin, args...)
			if want := echoOf(up); err != nil || stdout != want {
				t.Errorf("POST 128 KiB with 1 KiB windows: %q, %v; want %q\nstderr:\n%s", stdout, err, want, tail(stderr, 2000))
			}
		})
	}
}

// bodySizes are the request body sizes TestH2Bodies sends: from 1
// byte to 128 KiB, around each 16 KiB boundary (a TLS record's largest
// plaintext and h2's default largest frame) closely, where HEADERS, frame
// headers and DATA straddle records, and spread between.
func bodySizes() []int {
	set := map[int]bool{}
	for _, n := range []int{1, 2, 100, 1000, 4096, 10000, 24000, 40000, 65535, 65536, 65537, 100000} {
		set[n] = true
	}
	offsets := []int{-256, -160, -135, -112, -96, -64, -32, -16, -9, -1, 0, 1, 9, 64}
	for k := 1; k <= 8; k++ {
		for _, d := range offsets {
			if n := k*16384 + d; n >= 1 && n <= 128<<10 {
				set[n] = true
			}
		}
	}
	out := make([]int, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// TestH2Bodies: nghttp, and curl (libcurl's HTTP/2 is libnghttp2 too,
// but it frames and writes a body its own way: the client that found
// bodies stuck around 16 KiB), POST each of bodySizes on each front end;
// every body is answered, and the backend's echo (its length and SHA-256)
// says it arrived whole. nghttp opens a connection per body (and sends
// those at each boundary's edge again without a content-length); over TLS
// curl sends a quarter of the sizes one after another on one connection
// (--next), four such connections at once. Each body has 10 s.
func TestH2Bodies(t *testing.T) {
	nghttp := tool(t, "", nghttp2Install, "nghttp")
	curl := tool(t, "", "apt-get install curl", "curl")
	be := echoBackend(t)
	type body struct {
		n      int
		file   string
		expect string
	}
	dir := t.TempDir()
	var bodies []body
	for _, n := range bodySizes() {
		// Each size its own bytes: a body answered for another's would show.
		b := pattern(n + 7)[7:]
		file := filepath.Join(dir, strconv.Itoa(n))
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, body{n, file, echoOf(b)})
	}
	for _, f := range fronts {
		t.Run(f.String(), func(t *testing.T) {
			s := startSentry(t, f, be, appOpts{})
			s.checkDriver(t)
			url := s.url("/echo")
			var mu sync.Mutex
			failed := map[string][]string{}
			fail := func(client string, n int, how string) {
				mu.Lock()
				failed[client] = append(failed[client], fmt.Sprintf("%6d bytes%s", n, how))
				mu.Unlock()
			}
			work := make(chan func())
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for w := range work {
						w()
					}
				}()
			}
			for _, b := range bodies {
				work <- func() {
					args := []string{"-t", "10", "-d", b.file, url}
					if stdout, stderr, err := run(t, 30*time.Second, "", nghttp, args...); err != nil || stdout != b.expect {
						fail("nghttp", b.n, fmt.Sprintf(": got %q (%v); stderr: %s", stdout, err, tail(lastLines(stderr, 2), 300)))
					}
					if m := b.n % 16384; m <= 1 || m == 16383 {
						args = append([]string{"--no-content-length"}, args...)
						if stdout, stderr, err := run(t, 30*time.Second, "", nghttp, args...); err != nil || stdout != b.expect {
							fail("nghttp", b.n, fmt.Sprintf(" (no content-length): got %q (%v); stderr: %s", stdout, err, tail(lastLines(stderr, 2), 300)))
						}
					}
				}
			}
			// curl 7.88's --http2-prior-knowledge fails every transfer
			// after the first on a reused connection ("Error in the HTTP2
			// framing layer", the same against nginx), so over h2c each
			// body has its own curl.
			var batches [][]body
			if f.tls() {
				batches = make([][]body, 4)
				for i, b := range bodies {
					batches[i%4] = append(batches[i%4], b)
				}
			} else {
				for _, b := range bodies {
					batches = append(batches, []body{b})
				}
			}
			for _, batch := range batches {
				work <- func() {
					var args []string
					want := map[int]string{}
					for _, b := range batch {
						if args != nil {
							args = append(args, "--next")
						}
						args = append(args, "-sS", "-m", "10", "--data-binary", "@"+b.file, "-H", "Content-Type:",
							"-w", "|%{http_version}|%{response_code}|"+strconv.Itoa(b.n)+"|\n")
						if f.tls() {
							args = append(args, "--http2", "--cacert", s.ca)
						} else {
							args = append(args, "--http2-prior-knowledge")
						}
						args = append(args, url)
						want[b.n] = b.expect
					}
					stdout, stderr, err := run(t, 10*time.Minute, "", curl, args...)
					for _, a := range curlTransfers(stdout) {
						exp, ok := want[a.n]
						if !ok {
							continue
						}
						delete(want, a.n)
						switch {
						case a.code == "000":
							fail("curl", a.n, ": no answer within curl's 10 s")
						case a.version != "2" || a.code != "200" || a.body != exp:
							fail("curl", a.n, fmt.Sprintf(": HTTP/%s %s %q, want HTTP/2 200 %q", a.version, a.code, a.body, exp))
						}
					}
					for n := range want {
						fail("curl", n, fmt.Sprintf(": no transfer reported (curl: %v; stderr: %s)", err, tail(lastLines(stderr, 2), 300)))
					}
				}
			}
			close(work)
			wg.Wait()
			for _, c := range []string{"nghttp", "curl"} {
				if l := failed[c]; len(l) > 0 {
					sort.Strings(l)
					t.Errorf("%s: %d bodies not echoed whole:\n%s", c, len(l), strings.Join(l, "\n"))
				}
			}
		})
	}
}

// curlTransfer is one transfer of a curl run whose -w wrote
// "|VERSION|CODE|SIZE|\n" after each response body.
type curlTransfer struct {
	version, code, body string
	n                   int
}

var curlMark = regexp.MustCompile(`\|([0-9.]*)\|(\d+)\|(\d+)\|\n`)

func curlTransfers(out string) []curlTransfer {
	var r []curlTransfer
	for {
		m := curlMark.FindStringSubmatchIndex(out)
		if m == nil {
			return r
		}
		n, _ := strconv.Atoi(out[m[6]:m[7]])
		r = append(r, curlTransfer{version: out[m[2]:m[3]], code: out[m[4]:m[5]], n: n, body: out[:m[0]]})
		out = out[m[1]:]
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}
