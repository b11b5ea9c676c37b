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
// Per request: Share returns the entry's standing (and, within its share,
// its bucket for the tick), read from one atomic word Tick wrote; Done
// adds the decision (admitted, refused by the mode, or shed) to one
// packed atomic counter, and a refusal that held room for a more
// important class to a second one. No allocation, no lock.
//
// # Tick: rates, capacity, the fair level
//
// Every TickInterval (100 ms) Tick folds each entry's counters into its
// rates: a fast one (τ = 1 s) and the demand it is judged by, a slow one
// (τ = 30 s) that Poisson noise hardly moves, set to the fast one when
// they part by 2× (a client that rose or fell is judged by what it sends
// now). A class's capacity C is its admitted rate (τ = 1 s) while the mode
// refused some of what it was given, and never falls while the mode took
// everything; a tick in which nothing arrived teaches nothing (a stalled
// generator, an idle class: C is not forgotten). When the mode refuses in
// a tick C rose to, C keeps what it admitted in that tick, if that is
// above the smoothed rate (a sample of the capacity the smoothed rate
// lags). And once the filter alone has been the limit for a second (the
// mode refused nothing while the filter shed), C doubles a tick until
// the mode refuses, as TCP's slow start does: the mode guards the SLA,
// so a C that overshoots only stops the filter being the limit, and the
// mode's first refusal sets C back to what was admitted. (At 20% a tick,
// a flood from the first second, with C learned at a few requests a
// second, held polite clients over their share for 3-4 s;
// TestStartFloodFillsFast.) A shorter wait than a second let C overshoot
// in adaptive mode, whose refusals come seldom, and the flood took
// polite bronze's room beside gold (TestFairGoldInBronzeFlood). Decision: the marginal tier's probe alone does
// not find the capacity when C was learned low (a start, while the mode's
// model grew; a stall): what it offers goes to the clients just over f,
// which may have no more to send, and a flood is held at f. The class
// then stayed at 0.6× the farm with every client at f, polite ones
// included (TestStartSeveralClients); after a 1.5 s stall C took over
// 6 s to regain 90%, now 1.4 s (TestCapacityRegains). A refusal that only
// holds room for a more important class (admission.RejectPriority) counts
// as neither: it says when the classes above burst, not what the class
// carries between their bursts. Followed, C sank with every burst, the
// filter then let through less than the mode would take between them,
// and C sank further (polite bronze beside gold, no flood: 74% with
// sharing against 83% without). The class shares while the mode refused
// something for its own capacity within the last second, and only while
// it has two active clients or more: a lone client has no one to share
// with, so the mode alone decides it (a filter there could only refuse
// what the mode would take while C lags behind a start or a grown farm).
// Then the max-min fair level f solves
//
//	Σ_c min(r_c, f) = C
//
// by water-filling over the sorted demands (+Inf when all fit).
//
// # Standing
//
// A client with r ≤ f_in is WithinShare: the mode decides it as its
// class. f_in is f, or the level of the capacity the class held over the
// last 10 s (C smoothed, τ = 10 s) when C fell below it. Decision: a
// client's standing does not follow a dip of C. In a stall of the box
// (the farm frozen 1.5 s, the mode refusing what it cannot serve) C falls
// to a tenth within the stall and takes seconds to regain; judged by it,
// every polite client was over its share and refused as over_share for
// up to 2 s after the farm was back (TestFairStall). Judged by the held
// level, they stay within; the turns and the floods are still sized by
// C and the admitted rate, so the dip costs the over-share clients, not
// the polite ones, until C is back (below).
//
// A within-share client has a bucket: it refills at f_in and holds 2 s of
// it (burstWindow); the tick's requests past what it holds are OverShare
// (a client that starts to flood gets at most the bucket before the next
// tick judges it by its rate). Decision: a bucket over a window, as
// HAProxy's per-source rate over a period, not a per-tick allowance: a
// polite client's arrivals come in bursts (a generator that lagged sends
// its backlog at once), and two ticks of f counted a third of a 1.5 s
// burst over share (TestBurstWithinShare). Tick keeps the bucket and
// publishes what it holds in the slot's state word, so Share reads it
// with the standing: no extra load. A client over f gets:
//
//   - OverShare while it has its turn: decided as its class with room
//     held for the within-share demand, as a class is decided with room
//     held for the classes above it;
//   - Marginal, with a probability, if it is one of the few clients that
//     fill what the turns leave: room held for the turns too, and more
//     for each client ranked before it in the tier (its rank, below);
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
// (1 − 3%) of what the class admits (its smoothed admitted rate, never
// above C) less the within-share demand and the floods' f; a client in
// its turn keeps it within 3% over the budget, so noise does not take
// turns away and give them back. What C leaves past the turns, and a
// probe of 3% of C past that, goes to as few clients as cover it (the
// marginal tier), in order: a client cut from its turn as the budget
// shrank, a due client waiting for room, then the one whose turn ended
// last. Only a turn given (admitted whole)
// ends one, as the clock turns its place past it: neither a share of the
// marginal tier nor being let through as a flood is a turn, and a shift
// of ranks (clients joining) that pushes a place past its turn does not
// end it. (Counted as turns, a start with the capacity
// learned low, f low and every client over 8f, left most clients "done"
// until their place came round, up to a rotation later: half as many
// turns as the capacity held, the rest spread over the marginal tier,
// 40% of the clients neither admitted nor refused in any 10 s window
// for two minutes; TestTurnsAfterLowStart.) Decision: a rank, not a
// hash, so turns are spread evenly and their sum stays near the budget; a 10 min
// rotation, not an hour, so that a client's long-run share reaches f
// within minutes while any 10 s window sees almost every client either
// admitted or not.
//
// Decision: the marginal tier is sized by the capacity, not by what the
// mode admitted of it. The mode admits a marginal request only where the
// turns leave room, so every client it goes to is admitted part of the
// time: the tier must go to as few clients as it can. Sized by what the
// mode took of it (widened while the mode took all, and added to what
// the budget left), it swung by a factor of ten and went to about five
// clients at a time, each admitted about half the time: in fair100.yaml
// most of the clients partial in a 10 s window (docs/performance.md).
// Sized by C it covers the turns' margin, what the admitted rate trails
// C by, and the probe: two to five clients of an equal hundred. And in
// order, not "the clients marginal at the last tick first": the order
// moves only as turns start and end, while that rule kept one client
// marginal for as long as the tier lasted, over its share
// (TestFairEqualShares).
//
// Decision: the marginal tier is ranked. Its clients are given it in the
// order above, and each carries its place in it (Share's third result,
// kept in the slot's state word beside the probability;
// admission.Request.Rank). A mode admits the tier rank by rank: rank k
// holds the reserve floor's share again of the room rank k − 1 leaves
// (package batchac, Fair share), so what the mode refuses of the tier, which it must (the probe
// keeps C honest), falls on the last clients instead of on every
// client of the tier at random. Unranked, the mode admitted under a
// third of the tier, spread over all its clients, so each was partial in
// every window it held the tier; ranked, the first client of the tier
// is admitted nearly whole and the last nearly not at all, and fewer
// clients hold the tier at all, as the tier's share of the admitted
// load stays with the first. The cost is a little goodput: the last
// ranks are admitted only while the farm has room past the first ones'
// (control's fair100 simulation, TestFairConsistentFarm600). DAGOR
// does the same with its user priority: an admission level is a
// business priority and a user priority below which requests pass.
// Adaptive mode does not rank (package adaptive): its token bucket
// holds one share for the whole tier, and holding more per rank there
// starved the heavy clients of TestFairHeavyTail.
//
// Decision: the budget follows what the class admits, not C alone. C
// doubles a tick once the filter alone has been the limit for a second
// (its slow start, above), and that also happens in steady overload
// whenever the mode refuses nothing for a second: sized by C, the budget
// then gave turns for a tick or two to clients out of theirs, which the
// mode then refused alongside those in turns. Sized by the admitted rate,
// the rise goes to the marginal tier, which the mode refuses first.
//
// # Limits
//
// The capacity C is what the mode admitted while it refused some of what
// it was given. A mode whose own refusals come in bursts that do not
// shrink with the load it is offered (not the reserve, which is told
// apart) still makes C an underestimate when every client is over f: the
// turns then offer it less than it would take. A farm that grew is found
// by the probe alone (a second or so in the simulations); the held level
// only covers a capacity that sank and comes back. The other side of the held level: after a lasting
// fall of the capacity (a backend lost), for some 10 s a client between
// the new level and the held one still counts as within its share, and
// competes with the polite clients in the mode as it would without
// sharing.
//
// Consistency has a floor the rotation sets. N over-share clients make 2N
// turn changes a rotation T, so a window of W seconds holds about 2N·W/T
// of them (100 clients, 10 s, 10 min: 3.3), each client partial in that
// window unless its change falls at an edge; the marginal tier adds the
// clients it goes to, one or two of which the ranks leave partial. A
// longer Rotate lowers the first term in proportion, and delays by as
// much the time a client takes to reach its long-run share f (one
// rotation); the default keeps that within minutes. Noise in the mode's
// refusals and in the clients' rates adds to the floor: now and then the
// mode refuses a client in its turn (docs/performance.md, fair100.yaml).
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
//	slot, share, rank := t.Share(class, id.Key(req, addr), addr)
//	r.Share, r.Rank = share, rank      // the mode reads them
//	d := mode.Admit(r)
//	t.Done(slot, share, d.Verdict)
package fairshare
