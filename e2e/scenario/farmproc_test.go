package scenario

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
)

// TestFarmProc runs the farm in its own process as the runner does
// (e2e/cmd/farm -control): it serves on the addresses it reports, its
// stats count what it served, an event changes it, a failed event's error
// comes back, and closing its stdin ends it.
func TestFarmProc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds e2e/cmd/farm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := BuildFarm(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	p, err := startFarmProc(ctx, bin, farm.Config{Servers: 2, Slots: 2, Routes: []farm.Route{
		{Path: "/", Prefix: true, IO: farm.Dist{Kind: farm.Fixed, Mean: time.Millisecond}}}}, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if len(p.Addrs()) != 2 || p.Config().Servers != 2 || p.Config().Slots != 2 {
		t.Fatalf("addrs %v, config %+v", p.Addrs(), p.Config())
	}
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	for i := 0; i < 3; i++ {
		resp, err := c.Get("http://" + p.Addrs()[1] + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	st, err := p.Stats()
	if err != nil || len(st) != 2 || st[0].Completed != 0 || st[1].Completed != 3 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	one := 1
	if err := p.Apply(Event{Kill: &one}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get("http://" + p.Addrs()[1] + "/x"); err == nil {
		t.Fatal("killed server answered")
	}
	three := 3
	if err := p.Apply(Event{Kill: &three}); err == nil || !strings.Contains(err.Error(), "no server 3") {
		t.Fatalf("a kill of server 3 of 2: %v", err)
	}
	if err := p.Apply(Event{Upgrade: true}); err == nil {
		t.Fatal("an upgrade played on the farm: no error")
	}
	p.Close()
	select {
	case <-p.done:
	default:
		t.Fatal("the farm's process still runs after Close")
	}
	if _, err := c.Get("http://" + p.Addrs()[0] + "/x"); err == nil {
		t.Fatal("a server answered after Close")
	}

	// A farm process that dies: its stats fail at once, and Close says
	// it failed.
	q, err := startFarmProc(ctx, bin, farm.Config{Servers: 1}, &log)
	if err != nil {
		t.Fatal(err)
	}
	q.cmd.Process.Kill()
	<-q.done
	if _, err := q.Stats(); err == nil {
		t.Fatal("stats of a dead farm: no error")
	}
	if err := q.Close(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Close of a dead farm: %v", err)
	}
}
