package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
)

// The farm runs in a process of its own (doc.go, "The farm's process"):
// the runner starts `farm -control` (e2e/cmd/farm) and speaks to it in
// JSON lines over the child's stdin and stdout, one request and one reply
// at a time. The first request is the farm's configuration; its reply
// carries the servers' addresses and the normalized configuration. Then
// "stats" and "event" requests. The child exits when its stdin closes, so
// a runner that dies leaves no farm behind.

// farmRequest is one line the runner writes.
type farmRequest struct {
	// Op is "start", "stats" or "event".
	Op     string       `json:"op"`
	Config *farm.Config `json:"config,omitempty"`
	Event  *Event       `json:"event,omitempty"`
}

// farmReply is one line the child writes.
type farmReply struct {
	Addrs  []string     `json:"addrs,omitempty"`
	Config *farm.Config `json:"config,omitempty"`
	Stats  []farm.Stats `json:"stats,omitempty"`
	Err    string       `json:"err,omitempty"`
}

// ServeFarmControl is the child's side: it reads farmRequests from in and
// answers each on out, starting the farm on the first ("start") and
// closing it when in ends. start is farm.Start with the child's options.
func ServeFarmControl(in io.Reader, out io.Writer, start func(farm.Config) (*farm.Farm, error)) error {
	dec := json.NewDecoder(bufio.NewReader(in))
	dec.DisallowUnknownFields() // a runner newer than this binary is an error, not a silent default
	enc := json.NewEncoder(out)
	var f *farm.Farm
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		var req farmRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var rep farmReply
		switch {
		case req.Op == "start" && f == nil && req.Config != nil:
			var err error
			if f, err = start(*req.Config); err != nil {
				rep.Err = err.Error()
			} else {
				cfg := f.Config()
				rep.Addrs, rep.Config = f.Addrs(), &cfg
			}
		case f == nil:
			rep.Err = fmt.Sprintf("op %q before the farm started", req.Op)
		case req.Op == "stats":
			rep.Stats = f.Stats()
		case req.Op == "event" && req.Event != nil:
			if err := ApplyFarmEvent(f, *req.Event); err != nil {
				rep.Err = err.Error()
			}
		default:
			rep.Err = fmt.Sprintf("bad request %+v", req)
		}
		if err := enc.Encode(&rep); err != nil {
			return err
		}
	}
}

// farmProc is the runner's side: a farm in a child process.
type farmProc struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	dec     *json.Decoder
	done    chan struct{} // closed when the child has exited
	waitErr error         // cmd.Wait's, once done is closed

	closeOnce sync.Once
	closeErr  error

	mu    sync.Mutex // one request and its reply at a time
	addrs []string
	cfg   farm.Config
}

// farmTimeout bounds each exchange with the child.
const farmTimeout = 10 * time.Second

// startFarmProc starts bin (e2e/cmd/farm) with -control, its stderr going
// to logw, and starts cfg's farm in it.
func startFarmProc(ctx context.Context, bin string, cfg farm.Config, logw io.Writer) (*farmProc, error) {
	cmd := exec.CommandContext(ctx, bin, "-control")
	cmd.Stderr = logw
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("farm %s: %w", bin, err)
	}
	p := &farmProc{cmd: cmd, in: in, dec: json.NewDecoder(bufio.NewReader(out)), done: make(chan struct{})}
	p.dec.DisallowUnknownFields()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	rep, err := p.call(farmRequest{Op: "start", Config: &cfg})
	if err != nil {
		p.Close()
		return nil, err
	}
	if rep.Config == nil || len(rep.Addrs) == 0 {
		p.Close()
		return nil, fmt.Errorf("farm %s: no addresses in its reply", bin)
	}
	p.addrs, p.cfg = rep.Addrs, *rep.Config
	return p, nil
}

// call sends req and waits (at most farmTimeout) for the reply.
func (p *farmProc) call(req farmRequest) (farmReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	type result struct {
		rep farmReply
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		b, err := json.Marshal(req)
		if err == nil {
			_, err = p.in.Write(append(b, '\n'))
		}
		if err == nil {
			err = p.dec.Decode(&r.rep)
		}
		r.err = err
		ch <- r
	}()
	t := time.NewTimer(farmTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return farmReply{}, fmt.Errorf("farm process: %w", r.err)
		}
		if r.rep.Err != "" {
			return r.rep, errors.New(r.rep.Err)
		}
		return r.rep, nil
	case <-t.C:
		// The child is stuck: kill it, which ends the pending exchange.
		p.cmd.Process.Kill()
		<-ch
		return farmReply{}, fmt.Errorf("farm process: no reply to %q within %v", req.Op, farmTimeout)
	}
}

// Addrs are the servers' host:port, in order.
func (p *farmProc) Addrs() []string { return p.addrs }

// Config is the farm's configuration as normalized at its start.
func (p *farmProc) Config() farm.Config { return p.cfg }

// Stats are the servers' counters now.
func (p *farmProc) Stats() ([]farm.Stats, error) {
	rep, err := p.call(farmRequest{Op: "stats"})
	return rep.Stats, err
}

// Apply plays a farm event in the child.
func (p *farmProc) Apply(e Event) error {
	_, err := p.call(farmRequest{Op: "event", Event: &e})
	return err
}

// Close closes the child's stdin, which closes its farm and ends it, and
// waits for it (killing it after farmTimeout). Its error says the child
// failed or had to be killed. Later calls return the first's.
func (p *farmProc) Close() error {
	p.closeOnce.Do(func() {
		p.in.Close()
		select {
		case <-p.done:
			if p.waitErr != nil {
				p.closeErr = fmt.Errorf("farm process: %w", p.waitErr)
			}
		case <-time.After(farmTimeout):
			p.cmd.Process.Kill()
			<-p.done
			p.closeErr = fmt.Errorf("farm process: still running %v after its input closed; killed", farmTimeout)
		}
	})
	return p.closeErr
}
