// Package learned carries what sentry has learned from one process to the
// next: across a binary upgrade (SIGUSR2), from the old process to the new
// one over a socket, and across a restart, through an optional state file.
//
// # What is carried
//
// What a policy reload keeps by name, and nothing else: per app, the
// admission stack's state (control.AppState: the estimator's per-key
// service times, class priors, queueing delay and arrival rates; batch
// admission's learned parallelism P; threshold mode's learned capacity;
// the auto mode switch's mode and hysteresis, and the fall-back rule's
// memory; adaptive mode's per-class rates and smoothed percentiles;
// selective early termination's per-class F) and the backends' health
// (lb.Health: down marks, passive ejections and failure counts, by
// address). Counters and histograms are not carried: a new process's
// Prometheus counters start at 0, as after any restart.
//
// Decisions at the edges. Batch admission's probe ceiling (batchac/doc.go,
// "The probe") is carried with P: a concurrency found saturated is not
// probed again for the rest of its hold, and a ceiling that has lapsed
// by the time it is read is dropped. The estimator's queue now (QNow) is
// not: it is a measurement of the last few completions, not something
// learned; its 250 ms half-life ages it to nothing before a state file
// is read, and after a handover the new process's first eight
// completions replace it. Meanwhile the one rule that reads it,
// work-conserving admission, also needs a free slot -- the peer's
// requests in flight count -- and no request waiting in any queue, which
// an overload does not leave. The admin API's runtime overrides (a
// backend drained or disabled, the log level, a forced admission mode)
// are not carried either: as HAProxy's runtime changes end with a
// reload, sentry's end with the process, and the new one runs the
// policy as written. An auto mode switch held in a mode exports the
// state the end of the hold would leave (batch mode, its hysteresis
// memory kept), never the held mode.
//
// # The document
//
// One JSON object, self-describing and versioned (Document): "format" is
// always "sentry-learned-state" and "version" is Version. Decode refuses
// another format or version, an unknown field and an app named twice, as
// a whole: a document it cannot trust is not half-applied. Within a
// valid document every item is matched against the policy in force by
// the same stable names a reload uses -- app, class, key, backend address
// -- and checked by its own package: an item the policy no longer has (a
// renamed class, a removed backend) or a value out of range is left out
// with a log line, and the rest is taken. Nothing in a document ever
// stops a start.
//
// Times in the document are unix nanoseconds of the wall clock. A state
// read later than it was taken ages as it would have in a running
// process: decayed weights by their half-lives, arrival rates by their
// smoothing, as if no request had come since.
//
// # The handover
//
// tableflip passes the listening sockets to the new process; the old one
// adds one more file, its end of a Unix socket pair, named HandoverFile.
// On it (Giver on the old side, Taker on the new):
//
//	new → old  {"want":"sentry-learned-state","version":1}
//	old → new  the Document, one line, taken at that moment
//	both ways  {"inflight":{"app":n,...}} every InflightEvery until the old one has drained
//	new → old  {"failed":"reason"} if the new process fails before it is ready
//
// The new process asks before it parses its policy and restores before
// it serves, so its first admission decision already uses what the old
// one knew a few milliseconds earlier. Both processes then serve the same
// backends until the old one has drained: the new one's requests start
// while the old one's are still in flight, and the old one keeps serving
// its open connections for a while. Each reports its own requests in
// flight per app, and each counts the other's as load
// (control.Manager.SetPeerInflight); otherwise each would see only its
// own share of the farm and admit a whole farm's worth of work, and the
// backends would queue twice the load at the moment of the upgrade. A
// report older than StaleAfter, or the end of the stream (the old process
// exited, or the new one failed), counts as none.
//
// Decision: a socket, not a file written at SIGUSR2. A file would be as
// old as the new process's start-up by the time it serves, and could not
// carry the in-flight counts or the new process's reason to fail, which
// the old process reports to `sentry upgrade`.
//
// A new process whose parent does not offer the file (an older sentry)
// or whose request fails within RequestTimeout starts from the state
// file if there is one, else afresh, and logs why.
//
// # The state file
//
// `sentry run -state-file FILE` reads FILE at start (when no handover
// gave a state) and writes it at a stop and every SaveEvery while
// running, atomically (WriteFile: a temporary file, fsync, rename), so a
// crash leaves the last checkpoint. A missing file is not an error; one
// that does not decode is logged and ignored.
package learned
