package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ---- limiter: failsafe-go's adaptive concurrency limiter ----

// limiterPeer runs e2e/cmd/limiter, a reverse proxy whose overload control
// is failsafe-go's adaptive concurrency limiter, configured as its expert
// user would for the scenario's farm (LimiterArgs). It is built from this
// module with the go tool on first use. It has no classes.
type limiterPeer struct{}

func (limiterPeer) Name() string       { return "limiter" }
func (limiterPeer) MarksRejects() bool { return false }

func (limiterPeer) Available() error {
	if _, err := moduleRoot(); err != nil {
		return err
	}
	return nil
}

// LimiterArgs are the limiter peer's flags for sc: its initial limit is the
// farm's worker slots (servers × slots), and a request waits for a permit
// at most half the smallest class SLA.
func LimiterArgs(sc *Scenario, listen string, backends []string) []string {
	return []string{
		"-listen", listen,
		"-backends", strings.Join(backends, ","),
		"-initial", strconv.Itoa(max(1, sc.Farm.Servers*sc.Farm.Slots)),
		"-max-wait", (sc.MinSLA() / 2).String(),
	}
}

func (limiterPeer) Start(ctx context.Context, env PeerEnv) (Running, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(env.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "limiter")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./e2e/cmd/limiter")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the limiter: %v\n%s", err, out)
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	proc, err := startProcess(filepath.Join(dir, "peer.log"), bin, LimiterArgs(env.Scenario, listen, env.Backends)...)
	if err != nil {
		return nil, err
	}
	r := &procRunning{proc: proc, addr: listen, sig: syscall.SIGTERM}
	if err := waitReady(ctx, proc, "http://"+listen+"/healthz", 10*time.Second); err != nil {
		r.Stop()
		return nil, fmt.Errorf("limiter: %w", err)
	}
	return r, nil
}

// moduleRoot is the directory of the sentry module the go tool sees from
// here (the runner is started inside the repository).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("the limiter peer needs the go tool: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("the limiter peer is built from the sentry module: run the scenario inside the repository")
	}
	return filepath.Dir(gomod), nil
}
