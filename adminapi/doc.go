// Package adminapi is the admin listener's runtime API: what an operator
// changes in a running sentry without editing the policy, as HAProxy's
// runtime API (`set server ... state drain`, `set log-level`) and Envoy's
// admin endpoints (`/logging`, `/healthcheck/fail`) allow. It holds no
// algorithm: it calls package lb for a backend's state, package control
// for an app's admission mode and hclog for the log level, and keeps the
// record of who changed what.
//
// # What it changes
//
//   - A backend's state (lb.Pool.SetState): drain (out of rotation; the
//     requests in flight finish; its idle connections close), disable
//     (the same, and its health checks pause: maintenance), enable (back).
//     Every engine picks from the one pool, so all of them see it on
//     their next pick.
//   - The log level of the root logger (hclog's SetLevel: every named
//     logger shares it).
//   - An app's admission mode (control.App.Force): batch, threshold,
//     adaptive or off, held until the next reload; "policy" ends it.
//
// Each change is an override of the policy: logged at INFO with the
// peer's address (by) and how it was let in (auth), kept in a ledger
// with the time, shown in GET /runtime, in /status.json and on the status
// page, and in /config under the extension key x-runtime-overrides, after
// the policy (policy.DumpExtension: the document stays a valid policy,
// and its policy part is `sentry check -dump`'s to the byte). A reload
// reverts every override (Revert, called by the daemon after a reload
// that applied), as HAProxy's runtime changes end with the process that
// holds them; an upgrade starts without any. The ledger is read against
// the live state: an entry whose backend left the pool, or whose force a
// rebuilt mode switch ended, is dropped, so what is shown is what is in
// force.
//
// # Routes
//
//	GET  /runtime                 everything: overrides, log level, apps (mode, backends)
//	GET  /runtime/backend         backends [?app=A][&backend=ADDR]
//	POST /runtime/backend         ?backend=ADDR&state=drain|disable|enable[&app=A]
//	GET  /runtime/log             the log level and the policy's
//	POST /runtime/log             ?level=trace|debug|info|warn|error|policy
//	GET  /runtime/admission       each app's mode, configured and forced
//	POST /runtime/admission       ?mode=batch|threshold|adaptive|off|policy[&app=A]
//	GET  /runtime/reset           the overrides
//	POST /runtime/reset           revert every override
//
// Parameters come in the query or a form body; answers are JSON. Without
// app, a backend change applies to every app that has the backend, a mode
// to every app. Another method gets 405.
//
// # Who may change things
//
// Reads are open, as /config and /metrics are. A change (POST) passes
// three checks, after the listener's Host allow-list (status.AllowHosts,
// against DNS rebinding) that guards every admin route:
//
//  1. net/http's CrossOriginProtection: a browser's cross-site request
//     (Sec-Fetch-Site, or an Origin other than the Host) is refused, so
//     a web page cannot post a form to 127.0.0.1:9901.
//  2. With admin.token_file, "Authorization: Bearer TOKEN", from every
//     peer, loopback included; compared in constant time
//     (policy.Secret.Equal); 401 otherwise.
//  3. Without a token, the peer must be a loopback address; 403 otherwise.
//
// Decision: no token is needed on loopback when none is configured. The
// admin listener listens on 127.0.0.1 by default, and who can reach a
// loopback port can already signal or ptrace the process on most hosts:
// HAProxy's stats socket and nginx's signals are local-only by default in
// the same way. A listener moved to another address (a pod IP, so that
// Prometheus scrapes it) takes no change from the network until a token
// is set, whatever admin.allowed_hosts says. In Kubernetes loopback is the
// pod's, shared by its containers (a sidecar can change things): set a
// token there.
//
// # Concurrency
//
// API.mu serialises the changes and guards the ledger; it is never taken
// on the request path, and the calls made under it (SetState, Force,
// SetLevel) take only their own leaf locks.
package adminapi
