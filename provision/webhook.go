package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Request is the JSON document the webhook POSTs for one reactive ask.
type Request struct {
	App       string    `json:"app"`
	Ask       int       `json:"ask"`             // servers asked for
	Current   int       `json:"servers_current"` // healthy servers now
	Needed    int       `json:"servers_needed"`  // the model's count
	DropRatio float64   `json:"drop_ratio"`      // over the window
	Time      time.Time `json:"time"`
}

// WebhookConfig configures a Notifier.
type WebhookConfig struct {
	URL     string        // where to POST; required
	Timeout time.Duration // per attempt (default 5s)
	// Retries is how many times a failed attempt (transport error or a
	// non-2xx status) is retried (default 2; negative: none).
	Retries int
	// Backoff is the wait before the first retry, doubled each time
	// (default 1s).
	Backoff time.Duration
	// Queue is how many asks may wait for delivery (default 16); an ask
	// beyond it is dropped and counted.
	Queue  int
	Client *http.Client // default: a client of its own
	Logger hclog.Logger
}

// Notifier delivers asks to a webhook from one goroutine (Run) fed by a
// bounded channel, so Notify never blocks its caller.
type Notifier struct {
	cfg       WebhookConfig
	ch        chan Request
	sent      atomic.Uint64
	failed    atomic.Uint64
	dropped   atomic.Uint64
	attempted atomic.Uint64
}

// NewNotifier fills cfg's defaults.
func NewNotifier(cfg WebhookConfig) *Notifier {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 2
	} else if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 16
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Notifier{cfg: cfg, ch: make(chan Request, cfg.Queue)}
}

// Notify queues r for delivery and reports whether it was queued; a full
// queue drops it (counted in Dropped). It never blocks.
func (n *Notifier) Notify(r Request) bool {
	select {
	case n.ch <- r:
		return true
	default:
		n.dropped.Add(1)
		n.cfg.Logger.Warn("provisioning webhook queue full; ask dropped", "app", r.App, "ask", r.Ask)
		return false
	}
}

// Sent, Failed, Dropped and Attempts count delivered asks, asks given up
// after every retry, asks dropped on a full queue, and HTTP attempts.
func (n *Notifier) Sent() uint64     { return n.sent.Load() }
func (n *Notifier) Failed() uint64   { return n.failed.Load() }
func (n *Notifier) Dropped() uint64  { return n.dropped.Load() }
func (n *Notifier) Attempts() uint64 { return n.attempted.Load() }

// Run delivers queued asks until ctx ends. Its owner starts it once.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-n.ch:
			n.deliver(ctx, r)
		}
	}
}

func (n *Notifier) deliver(ctx context.Context, r Request) {
	body, err := json.Marshal(r)
	if err != nil { // cannot happen for Request; counted all the same
		n.failed.Add(1)
		return
	}
	wait := n.cfg.Backoff
	for try := 0; ; try++ {
		err = n.post(ctx, body)
		if err == nil {
			n.sent.Add(1)
			return
		}
		if try >= n.cfg.Retries || ctx.Err() != nil {
			n.failed.Add(1)
			n.cfg.Logger.Error("provisioning webhook failed", "app", r.App, "attempts", try+1, "error", err)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			n.failed.Add(1)
			return
		case <-t.C:
		}
		wait *= 2
	}
}

func (n *Notifier) post(ctx context.Context, body []byte) error {
	n.attempted.Add(1)
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
