package scenario

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/sim/farm"
)

const withEvents = `name: t
farm:
  servers: 2
  slots: 4
  routes:
    - {path: /s, io: 5ms, heavy: {io: 500ms}}
classes:
  - name: a
    request: {paths: [{path: /s}]}
    open:
      rate: [{duration: 10s, from: 10}]
events:
  - {at: 1s, route: {path: /s, heavy_share: 0.1}}
  - {at: 2s, route: {path: /s, io: "exp:8ms", heavy_io: 1s}}
  - {at: 3s, speed: {server: 1, factor: 0.5}}
  - {at: 4s, kill: 0}
  - {at: 5s, restart: 0}
`

func TestParseEvents(t *testing.T) {
	sc, err := Parse("t.yaml", []byte(withEvents))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Events) != 5 || *sc.Events[0].Route.HeavyShare != 0.1 || sc.Events[1].Route.IO.Kind != farm.Exponential ||
		sc.Events[2].Speed.Factor != 0.5 || *sc.Events[3].Kill != 0 || *sc.Events[4].Restart != 0 {
		t.Fatalf("events %+v", sc.Events)
	}
	want := []string{"route /s heavy_share=0.1", "route /s io=exp:8ms heavy_io=1s", "server 1 speed 0.5", "kill server 0", "restart server 0"}
	for i, e := range sc.Events {
		if e.String() != want[i] {
			t.Errorf("event %d: %q, want %q", i, e.String(), want[i])
		}
	}
}

func TestEventErrorsHaveLines(t *testing.T) {
	ev := func(lines string) string {
		return strings.Replace(withEvents, withEvents[strings.Index(withEvents, "events:\n"):], "events:\n"+lines, 1)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"two kinds", ev("  - {at: 1s, kill: 0, restart: 0}\n"), "t.yaml:13: events[0]: give exactly one of"},
		{"none", ev("  - {at: 1s}\n"), "t.yaml:13: events[0]: give exactly one of"},
		{"after the run", ev("  - {at: 11s, kill: 0}\n"), "t.yaml:13: events[0]: at 11s is after the scenario's duration 10s"},
		{"out of order", ev("  - {at: 2s, kill: 0}\n  - {at: 1s, restart: 0}\n"), "t.yaml:14: events[1]: at 1s is before"},
		{"no such route", ev("  - at: 1s\n    route: {path: /x, heavy_share: 0.5}\n"), "t.yaml:14: events[0]: route: the farm has no route \"/x\""},
		{"route changes nothing", ev("  - {at: 1s, route: {path: /s}}\n"), "t.yaml:13: events[0]: route: change something"},
		{"bad share", ev("  - {at: 1s, route: {path: /s, heavy_share: 1.5}}\n"), "t.yaml:13: events[0]: route: farm: route 0 (\"/s\"): heavy: share must be in [0, 1]"},
		{"bad dist", ev("  - {at: 1s, route: {path: /s, io: \"exp:x\"}}\n"), "t.yaml:13: dist"},
		{"no such server", ev("  - at: 1s\n    speed: {server: 2, factor: 2}\n"), "t.yaml:14: events[0]: speed.server: no server 2"},
		{"bad factor", ev("  - at: 1s\n    speed:\n      server: 1\n      factor: 0\n"), "t.yaml:16: events[0]: speed.factor must be > 0"},
		{"kill twice", ev("  - {at: 1s, kill: 1}\n  - {at: 2s, kill: 1}\n"), "t.yaml:14: events[1]: kill: server 1 is already killed"},
		{"restart a running server", ev("  - {at: 1s, restart: 1}\n"), "t.yaml:13: events[0]: restart: server 1 is not killed"},
		{"unknown key", ev("  - {at: 1s, kil: 1}\n"), "t.yaml:13: field kil not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// The player applies each kind of event to a running farm at its time;
// the farm behaves accordingly (heavy share, new cost, speed, kill,
// restart). Times are short and only their order is asserted.
func TestPlayEvents(t *testing.T) {
	f, err := farm.Start(farm.Config{Servers: 2, Slots: 2, Routes: []farm.Route{
		{Path: "/s", IO: farm.Dist{Kind: farm.Fixed, Mean: time.Millisecond}, Heavy: farm.Heavy{IO: farm.Dist{Kind: farm.Fixed, Mean: 2 * time.Millisecond}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	share := 1.0
	zero := 0
	events := []Event{
		{At: 0, Route: &RouteEvent{Path: "/s", HeavyShare: &share}},
		{At: 0, Speed: &SpeedEvent{Server: 1, Factor: 0.25}},
		{At: 0, Kill: &zero},
		{At: 0, Upgrade: true},
	}
	var lines []string
	upgrades := 0
	p := playEvents(context.Background(), func(e Event) error { return ApplyFarmEvent(f, e) }, events, 1, time.Now(), func() error { upgrades++; return nil }, func(s string) { lines = append(lines, s) })
	deadline := time.Now().Add(10 * time.Second)
	for f.Alive(0) {
		if time.Now().After(deadline) {
			t.Fatal("events not played")
		}
		time.Sleep(time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		n := len(p.played)
		p.mu.Unlock()
		if n == 4 || time.Now().After(deadline) {
			break
		}
	}
	played := p.stop()
	if len(played) != 4 || len(lines) != 4 || upgrades != 1 {
		t.Fatalf("played %+v, %d upgrades", played, upgrades)
	}
	for _, a := range played {
		if a.Err != nil {
			t.Fatalf("%s: %v", a.Event, a.Err)
		}
	}
	if f.Config().Routes[0].Heavy.Share != 1 {
		t.Fatal("share not changed")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(f.URLs()[1] + "/s")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Every request heavy (2 ms) at speed 0.25: 8 ms of I/O drawn, and a
	// fresh server has no timer compensation, so it waits at least that
	// (light at full speed would be 1 ms, heavy at full speed 2 ms).
	st := resp.Header.Get("Server-Timing")
	i := strings.Index(st, "io;dur=")
	if i < 0 {
		t.Fatalf("Server-Timing %q", st)
	}
	ioMS, err := strconv.ParseFloat(strings.TrimSpace(strings.SplitN(st[i+7:], ",", 2)[0]), 64)
	if err != nil || ioMS < 8 {
		t.Fatalf("io %v ms (%v), want at least 8: heavy at a quarter speed", ioMS, err)
	}
	if _, err := c.Get(f.URLs()[0] + "/s"); err == nil {
		t.Fatal("killed server answered")
	}

	// A restart later in the run; the player stops early on cancel and
	// reports only what it played.
	p = playEvents(context.Background(), func(e Event) error { return ApplyFarmEvent(f, e) }, []Event{{At: 0, Restart: &zero}, {At: time.Hour, Kill: &zero}}, 1, time.Now(), nil, func(string) {})
	for !f.Alive(0) {
		if time.Now().After(deadline) {
			t.Fatal("restart not played")
		}
		time.Sleep(time.Millisecond)
	}
	if played := p.stop(); len(played) != 1 || !f.Alive(0) {
		t.Fatalf("played %+v, alive %v", played, f.Alive(0))
	}
}
