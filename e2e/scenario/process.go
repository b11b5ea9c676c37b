package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sentry-proxy/sentry/internal/freeport"
)

// process is a peer running as a child process in its own process group.
// Its output goes to a log file, capped so an overloaded peer that logs
// every request cannot fill the disk.
type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// maxLogBytes caps a peer's log file.
const maxLogBytes = 20 << 20

type cappedWriter struct {
	mu sync.Mutex
	w  io.Writer
	n  int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n >= maxLogBytes {
		return len(p), nil
	}
	q := p
	if rest := maxLogBytes - c.n; int64(len(q)) > rest {
		q = q[:rest]
	}
	n, err := c.w.Write(q)
	c.n += int64(n)
	if err != nil {
		return n, err
	}
	return len(p), nil
}

func startProcess(logPath, name string, args ...string) (*process, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	w := &cappedWriter{w: lf}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &process{cmd: cmd, log: lf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig to the process, waits up to grace, then kills its
// process group (the process and the children it started, e.g. nginx's
// workers). It returns when the process has exited.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		killGroup(p.cmd.Process.Pid)
		<-p.done
	}
	// nginx workers exit on their own after the master; make sure.
	killGroup(p.cmd.Process.Pid)
}

// waitReady polls url until it answers 200, the process exits, or within
// passes.
func waitReady(ctx context.Context, p *process, url string, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	var last error
	for i := 0; time.Now().Before(deadline) && i < 1000; i++ {
		if p != nil && p.exited() {
			return fmt.Errorf("exited before it was ready: %v", p.err)
		}
		resp, err := c.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within %v: %v", url, within, last)
}

// freeAddr returns a 127.0.0.1 address with a port free right now.
func freeAddr() (string, error) { return freeport.Addr() }

var errNotInstalled = errors.New("not installed")

// BuildSentry builds ./cmd/sentry of the module the working directory is
// in, into out/.bin/sentry, and returns its absolute path.
func BuildSentry(ctx context.Context, out string) (string, error) {
	return buildCommand(ctx, out, "sentry", "./cmd/sentry", "-sentry")
}

// BuildFarm builds the farm (e2e/cmd/farm) into out/.bin/farm, as
// BuildSentry does sentry.
func BuildFarm(ctx context.Context, out string) (string, error) {
	return buildCommand(ctx, out, "farm", "./e2e/cmd/farm", "-farm")
}

// buildCommand builds the module's package pkg into out/.bin/name; flag
// names the option that gives a binary instead, for the error outside the
// module.
func buildCommand(ctx context.Context, out, name, pkg, flag string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", errors.New("not inside the sentry module; give " + flag + " PATH")
	}
	abs, err := filepath.Abs(filepath.Join(out, ".bin", name))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", abs, pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return abs, nil
}
