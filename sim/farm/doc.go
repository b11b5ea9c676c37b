// Package farm is a simulated web farm: N backend servers that behave like
// loaded web servers, for sentry's experiments (docs/algorithms.md §9: measure
// goodput and admitted p95 at 1×, 2×, 5× and 10× capacity).
//
// # The model
//
// Each server has a fixed number of worker slots, like Apache's
// MaxClients. A request holds a slot for its whole service; requests
// beyond the slots wait inside the server in a FIFO queue that is
// deliberately unbounded, so under overload response time grows without
// bound, which is the failure sentry exists to prevent. A released slot is
// handed straight to the oldest waiter, so nobody overtakes the queue. A
// request whose client leaves while it waits is dropped (a dead
// connection in a listen backlog costs a worker almost nothing).
//
// Service time is per route (exact path, or longest prefix) and has two
// parts, each drawn from a Dist (fixed, exponential or Pareto with shape
// and mean or scale, optionally truncated) with the server's own seeded
// RNG:
//
//   - CPU: a spin loop for that much wall-clock time. Optional, off by
//     default. On the 2-core machines these experiments run on, the farm
//     shares CPUs with the proxy and the load generator, so burning CPU
//     here distorts everything; use it only to study CPU contention.
//   - I/O: a sleep while holding the slot (a database or disk wait). The
//     default route is prefix "/", I/O fixed 20 ms.
//
// With sleep-based service the slots are the capacity limit:
//
//	capacity of one server = Slots / mean service time   (requests/s)
//	capacity of the farm   = Servers × Slots / mean service time
//
// Config.Capacity computes it (truncation included, response write time
// ignored). TestFarmCapacity checks the measured saturation throughput
// against it, within 10%.
//
// Timers fire late (about 0.5 ms on an idle machine, several ms on a busy
// one) and a woken waiter needs CPU before it runs, so a slot would be held
// longer than the drawn time and the real capacity would fall 10–15%
// short. Each server therefore shortens I/O waits by an estimate of that
// excess, an integrator that drives the mean slot holding time to the mean
// drawn time. Stats.Compensation exposes it: when it nears the mean I/O
// time or its 20 ms cap, the machine is too loaded for the model to hold.
//
// A route may mix two costs under one path (Route.Heavy): with
// probability Heavy.Share a request draws the heavy part's CPU and I/O
// instead of the route's, as a search or report whose cost the proxy
// cannot tell from its URL (5 ms, or 500 ms for one request in ten).
//
// # Changing the farm while it runs
//
// A scenario can change the farm mid-run (e2e/scenario events):
// UpdateRoute swaps a route's model (its distributions or heavy share) on
// every server at once; SetSpeed divides one server's drawn times by a
// factor; Kill stops a server as a crash would (listener and connections
// closed, its requests ended without a response, their slots freed) and
// Restart serves again on the same address with its counters kept.
// Requests already in service keep the times they drew.
//
// With AbortOnDisconnect a request stops work when its connection closes
// (the request context's Done, as Go's net/http gives it), in its CPU
// spin as in its I/O wait, and its slot is freed at once: the backend
// selective early termination needs (docs/termination.md).
//
// Static files are routes with Bytes (1 KB–256 KB typical, up to 16 MiB)
// and no service time; they still take a slot while the response is
// written, as in a prefork server.
//
// Every response carries Server-Timing: "cpu;dur=X, io;dur=Y,
// queue;dur=Z" in milliseconds: the CPU and I/O time actually spent and
// the time waited for a slot (docs/algorithms.md §1: the estimator's preferred
// source). /healthz answers at once outside the slots; /_farm/stats gives
// the server's counters as JSON. Unmatched paths get an immediate 404.
//
// # Configuration
//
// Config is plain data with yaml tags, so a scenario file can embed it;
// ParseConfig decodes strictly (unknown keys are errors). A Dist is a
// mapping or a shorthand string (see ParseDist):
//
//	farm:
//	  servers: 4
//	  slots: 8
//	  seed: 1
//	  routes:
//	    - {path: /, prefix: true, io: "exp:20ms"}
//	    - {path: /search, io: {kind: pareto, mean: 80ms, shape: 1.5, max: 5s}}
//	    - {path: /static/, prefix: true, bytes: 65536}
//
// # Concurrency
//
// Farm.mu guards the current config and orders UpdateRoute, Kill,
// Restart and Close; under it a Kill waits for the killed server's
// handlers, which never take it. Per server: slotPool.mu guards the slot
// count, the wait queue and the busy-time integral; rngMu guards the RNG;
// a life's enterMu (one life per listen, from Start or Restart to Kill or
// Close) orders handler entry against its close. No two of the per-server
// locks are ever held together. The route table and the speed are atomic
// pointers read once per request. time.Now is read before taking slotPool.mu and a waiter's channel
// is closed after releasing it. Counters are atomics. Close closes the
// connections first, then wakes every waiting or sleeping handler, and
// returns when all of them have returned: nothing outlives it.
//
// # Usage
//
//	f, err := farm.Start(farm.Config{Servers: 2, Slots: 8})
//	if err != nil { ... }
//	defer f.Close()
//	urls := f.URLs()                    // http://127.0.0.1:port, one per server
//	capacity, _ := f.Config().Capacity("/") // 2 × 8 / 20ms = 800 req/s
//	st := f.Stats()                     // completed, in flight, busy, utilisation
//
// Used by `sentry demo` (cmd/sentry/demo.go) and by the end-to-end tests
// and scenarios in e2e/; it lives outside e2e/ so the binary does not
// depend on a test folder. Standalone: e2e/cmd/farm (-config FILE, or
// -servers/-slots/-service).
package farm
