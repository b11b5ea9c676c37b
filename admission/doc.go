// Package admission holds the single seam between the request path and the
// admission algorithms: the Admitter interface the proxy calls before it
// relays a request, the Request it passes (class, bucket, estimated service
// time) and the Decision it gets back.
//
// The proxy reaches the admission algorithms only through this package: it
// imports none of batchac, thresholdac or control. It does import other
// packages for other jobs: policy (the snapshot it serves), lb (it picks
// and releases backends), classify (only the Request view it fills in for
// the classifier) and estimator (only StripServerTiming, to remove the
// timing entries from responses). Per-app classification, estimation and
// admission reach it through its own Controller interface, which
// cmd/sentry wires to control.App. Algorithms live in batchac (Cataclysm
// §3.1–3.2), thresholdac (§3.3) and, in "off" mode, AdmitAll. Every
// implementation must be safe for concurrent use, must not allocate per
// decision, and must bound how long Admit blocks.
//
// Switch and Switched (modeswitch.go) choose batch or threshold at run time
// from sentry's own CPU (Cataclysm §3.3, last paragraph; docs/algorithms.md §4);
// CPUMeter and ProcessCPUTime measure it. See Switch for hysteresis,
// episodes and the anti-flap guards. ModeAdaptive is SEDA's controller
// (package adaptive, RejectAdaptive); in auto mode Switch.Fallback moves
// between batch and adaptive on the health of the batch model, which the
// caller judges (package control's doc.go gives the rule: the admitted
// percentile missing R_sla while batch admits, or most responses without
// a service time, for k windows; back after N calm windows, whose
// reported service times agree with the estimates, N doubled after a
// relapse).
//
// Work conservation (docs/algorithms.md §10): no mode refuses a request
// while admitting it would cost no admitted request its SLA. A request
// that misses only its own target is admitted when it harms nobody, and
// the Decision says so (OverTarget, carried into the Ticket); each mode's
// condition is in its own doc (batchac, thresholdac, adaptive). Switch and
// Switched add no rejection of their own: auto mode's decisions are those
// of the mode in force, so the rule holds through every switch; ModeOff
// admits everything.
//
// Usage:
//
//	var a admission.Admitter = admission.AdmitAll{}
//	req := admission.Request{Class: 0, Bucket: 2, S: 3 * time.Millisecond}
//	if d := a.Admit(&req); d.Verdict != admission.Admit {
//		// answer with the prebuilt reject response
//	}
package admission
