package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/internal/freeport"
)

// sentryBin is the binary built once for the end-to-end tests;
// sentriesBin and autoscaleBin are e2e/cmd/sentries and e2e/cmd/autoscale,
// the harnesses of the several-sentries and closed-loop experiments,
// built with it (without -race: see TestSeveralSentriesShareAFarm).
var sentryBin, sentriesBin, autoscaleBin, farmBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sentry-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sentryBin, sentriesBin, autoscaleBin, farmBin = filepath.Join(dir, "sentry"), filepath.Join(dir, "sentries"), filepath.Join(dir, "autoscale"), filepath.Join(dir, "farm")
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../cmd/sentry", "./cmd/sentries", "./cmd/autoscale", "./cmd/farm")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sentry:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is a running sentry process.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { b := &syncBuffer{mu: make(chan struct{}, 1)}; return b }
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}
func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

// startSentry runs the binary with args and waits until url answers.
func startSentry(t *testing.T, readyURL string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(sentryBin, args...), out: newSyncBuffer()}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("sentry output:\n%s", p.out.String())
		}
	})
	waitHTTP(t, readyURL, 10*time.Second)
	return p
}

func waitHTTP(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %v", url, within)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(content, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
