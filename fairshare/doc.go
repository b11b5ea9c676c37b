// Package fairshare shares each class's capacity among its clients: when a
// class must shed, the clients over their max-min fair share are shed
// first, and a client within its share is shed only when the class admits
// less than the sum of those shares (docs/algorithms.md §12). Fairness
// lives inside a class; classes still go in order, decided by the
// admission mode (batch, threshold, adaptive), which it does not
// replace. It is a pure library: the clock is Tick's argument, the draw
// is injected (Config.Rand), no sockets.
//
// # Client identity
//
// Identity.Key names a request's client by a 64-bit hash, seeded per
// process so that no one can choose identities that collide in the table:
// by default its address after trusted_proxies (IPv6 grouped by a /64,
// IPv4-mapped addresses as IPv4), or per app a header (an API key), a
// cookie (a session) or a top-level claim of the bearer token, read
// WITHOUT verifying its signature (a scanner over the base64url payload,
// decoded on the stack). A request without the configured field is named
// by its address. Key does not allocate.
//
// # The table
//
// A Table is a fixed array of slots in buckets of Ways (8); an entry is
// (client, class), so a client active in two classes has two. Lookup is
// eight atomic loads; a new entry takes the bucket's lock and the way
// with the least traffic (smoothed rate plus this tick's decisions), or an
// empty one; an entry idle for 30 s is freed. Decision: set-associative,
// not a map and an LRU list, so that memory is fixed at New (a million
// distinct clients cannot grow it, TestMillionClients), the hot path
// takes no lock, and a flood of one-off clients evicts itself, not the
// steady clients it races with.
//
// Per request: Share returns the entry's standing, read from one atomic
// word Tick wrote; Done adds the decision (admitted, refused by the mode,
// or shed) to one packed atomic counter. No allocation, no lock.
//
// # Tick: rates, capacity, the fair level
//
// Every TickInterval (100 ms) Tick folds each entry's counters into its
// rates: a fast one (τ = 1 s) and the demand it is judged by, a slow one
// (τ = 30 s) that Poisson noise hardly moves, set to the fast one when
// they part by 2× (a client that rose or fell is judged by what it sends
// now). A class's capacity C is its admitted rate (τ = 1 s) while the mode
// refused some of what it was given, and never falls while the mode took
// everything. The class shares while the mode refused something within
// the last second, and only while it has two active clients or more: a
// lone client has no one to share with, so the mode alone decides it
// (a filter there could only refuse what the mode would take while C
// lags behind a start or a grown farm). Then the max-min fair level f solves
//
//	Σ_c min(r_c, f) = C
//
// by water-filling over the sorted demands (+Inf when all fit).
//
// # Standing
//
// A client with r ≤ f is WithinShare: the mode decides it as its class.
// One that sends more than two ticks' worth of f within a tick is
// OverShare for the rest of it (a client that starts to flood is not
// believed until the tick sees it). A client over f gets:
//
//   - OverShare while it has its turn: decided as its class with room
//     held for the within-share demand, as a class is decided with room
//     held for the classes above it;
//   - Marginal, with a probability, if it is the client that fills what
//     the turns leave: room held for the turns' demand too;
//   - SpareOnly otherwise: admitted only where it harms nobody (a free
//     slot, nothing waiting), else RejectOverShare (over_share).
//
// A flood (r > 8f) has no turn: it is OverShare with probability f/r all
// the time, so it is admitted at about f.
//
// # Turns (consistent admission)
//
// DAGOR (WeChat) ranks users by a hash that rotates hourly, so that under
// overload a user is served throughout a session or not at all. Here each
// over-share client has a place ψ on a circle: its rank by key among the
// class's over-share clients, spread evenly, plus the clock's phase in the
// rotation (Rotate, 10 min by default). Its turn is the first f/r of
// each revolution: over one rotation it is admitted at f, and within its
// turn it is admitted whole. Turns are granted in order within a budget,
// (1 − 3%) C less the within-share demand and the floods' f; a client in
// its turn keeps it within 3% over the budget, so noise does not take
// turns away and give them back. What the turns leave, and a probe of 3%
// of C, goes to as few clients as cover it (the marginal tier), those
// marginal at the last tick first. Decision: a rank, not a hash, so turns
// are spread evenly and their sum stays near the budget; a 10 min
// rotation, not an hour, so that a client's long-run share reaches f
// within minutes while any 10 s window sees almost every client either
// admitted or not.
//
// # Limits
//
// The capacity C is what the mode admitted while it refused some of what
// it was given. A mode that refuses below the class's capacity -- batch
// and threshold with the reserve, when the classes above burst -- makes
// C an underestimate; when every client of the class is over f, turns
// then offer the mode less than it would take, and the class admits less
// than without sharing (polite bronze beside gold at 0.8×: about 74%
// against 83%, TestFairGoldInBronzeFlood's log). Open.
//
// # Invariants
//
//   - Within-share clients are never refused for an over-share client's
//     sake: every mode holds room for their demand before it admits an
//     over-share request. over_share names a refusal of a client over its
//     share: without a turn, or where a within-share request would have
//     passed.
//   - Classes go in order: a request's tier only adds room held for its
//     own class's clients; the room held for the classes above is not
//     touched.
//   - Memory is fixed at New; Share and Done allocate nothing.
//
// # Locks
//
// tick (Tick alone) → a bucket's lock (insertion, Tick's pass over the
// bucket). Share and Done take none, except Share's insertion.
//
// # Usage
//
//	t, _ := fairshare.New(fairshare.Config{Classes: []string{"gold", "bronze"}})
//	go func() { for now := range ticker.C { t.Tick(now) } }()
//	slot, share := t.Share(class, id.Key(req, addr), addr)
//	r.Share = share                    // the mode reads it
//	d := mode.Admit(r)
//	t.Done(slot, share, d.Verdict)
package fairshare
