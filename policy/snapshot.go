package policy

import (
	"net/netip"
	"time"

	"github.com/sentry-proxy/sentry/classify"
	"github.com/sentry-proxy/sentry/estimator"
	"github.com/sentry-proxy/sentry/fairshare"
)

// Snapshot is a parsed, defaulted and validated policy. It is immutable once
// returned by Parse or Load: readers may share it across goroutines, and a
// reload replaces the whole snapshot (atomic.Pointer[Snapshot]).
type Snapshot struct {
	// Source names where the policy came from (a file path, or "<flags>").
	Source string
	// Hash is the SHA-256 of the source bytes, for change detection.
	Hash [32]byte

	Admin  Admin
	Log    Log
	Server Server
	Apps   []*App
	// Listeners is derived from the apps' listen addresses: one entry per
	// distinct address, in first-seen order.
	Listeners []*Listener
}

// Admin is the admin listener (metrics, health, status page).
type Admin struct {
	// Listen is host:port; default 127.0.0.1:9901. Empty means disabled
	// (written "off" in YAML).
	Listen string
	// AllowedHosts are the host names (lower-case, no port) the admin
	// listener answers in a request's Host, besides IP literals, which it
	// always answers (a DNS-rebinding request carries the attacker's name,
	// never an IP). nil, the default, means "localhost" and the machine's
	// host name; an empty list means IP literals only; AnyHost ("*") turns
	// the check off. Others get 421 Misdirected Request (status.AllowHosts).
	AllowedHosts []string
	// Pprof serves Go's profiler (net/http/pprof) under /debug/pprof/ on
	// the admin listener. Default false; a reload applies it at once.
	Pprof bool
	// ReadyRequiresBackend makes /readyz answer 503 while any app has no
	// healthy backend. Default false: a farm outage would otherwise make
	// the orchestrator take every sentry out of service (or restart it),
	// and the clients would get connection errors instead of sentry's
	// named 503 "no healthy backend".
	ReadyRequiresBackend bool
	// TokenFile holds the bearer token the admin listener's runtime API
	// (mutations: drain a backend, set the log level, force a mode)
	// requires, read on every load and reload into Token. "" (the
	// default): no token, and mutations are taken from loopback peers
	// only (package adminapi).
	TokenFile string
	// Token is TokenFile's token; never printed (Secret).
	Token Secret
}

// AnyHost in Admin.AllowedHosts accepts every Host.
const AnyHost = "*"

// Log configures hclog.
type Log struct {
	// Level: trace, debug, info (default), warn, error.
	Level string
	// Format: text (default) or json.
	Format string
	// Access enables the access log: one line per request, whatever
	// Level says. Default false. Written as log.access: true (the
	// shorthand) or as log.access.enabled.
	Access bool
	// AccessLog is where and how access lines go (log.access's mapping).
	AccessLog AccessLog
}

// AccessLog is the access log's destination, format and sampling.
type AccessLog struct {
	// Output: "stdout" (default), "stderr", or an absolute file path,
	// opened for append and reopened on SIGUSR1 (logrotate's
	// copytruncate is not needed).
	Output string
	// Format: "text" (default; nginx's combined format followed by
	// key=value fields) or "json" (one object per line).
	Format string
	// Rate is how many lines per second of requests that were not
	// rejected by admission are written at most (a token bucket with a
	// burst of one second's worth); the rest are dropped and counted
	// (sentry_access_log_dropped_total). Default 1000; 0 means every line.
	Rate int
	// RejectRate is the same for admission rejections (and no-backend
	// answers), counted apart so that a flood of rejections cannot crowd
	// out the admitted lines, nor grow the log with the flood. Default
	// 100; 0 means every line.
	RejectRate int
}

// Server holds front-end settings shared by every listener.
type Server struct {
	// Engine is the front end's engine, one for every listener of the
	// process: EngineLoops (default) or EnginePortable. Read when the
	// process starts; a reload that changes it applies after a restart or
	// an upgrade.
	Engine string
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request body once its headers are in.
	// Default 5m.
	BodyTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 60s.
	IdleTimeout time.Duration
	// WriteTimeout cuts a client that accepts no response bytes for this
	// long (an idle-style timeout: each write must progress within it, so
	// long downloads are not cut); 0 means none. Default 60s.
	WriteTimeout time.Duration
	// RequestBuffer is the largest request body read whole into sentry
	// before the request is admitted and dispatched (as nginx's
	// proxy_request_buffering); larger bodies stream. 0 turns buffering
	// off everywhere. Default 1 MiB.
	RequestBuffer int64
	// RequestBufferTotal caps the bytes of request bodies held in buffers
	// at once, across all connections of the process. A body that would
	// pass it gets 503 with Retry-After (and the connection closes); 0
	// means no cap. Default 256 MiB.
	RequestBufferTotal int64
	// ResponseBuffer is what one response may hold in memory while its
	// client takes it slower than its backend sends it (as nginx's
	// proxy_buffering): the backend is read at its own speed and its
	// connection released once the response is in. Taken 16 KiB at a
	// time. 0 turns response buffering off everywhere (every response
	// goes at its client's pace). Default 1 MiB.
	ResponseBuffer int64
	// ResponseBufferTotal caps the memory of every response's buffer
	// together; a response that finds it full goes on in its temporary
	// file, or at its client's pace. 0 means no cap. Default 256 MiB.
	ResponseBufferTotal int64
	// ResponseTempFile is what one response may hold in its temporary
	// file once its memory is full (nginx's proxy_max_temp_file_size);
	// past it the response goes at its client's pace. 0: no temporary
	// files. Default 1 GiB.
	ResponseTempFile int64
	// ResponseTempFileTotal caps the size of every temporary file
	// together. 0 means no cap. Default 1 GiB.
	ResponseTempFileTotal int64
	// ResponseTempDir is the directory of the temporary files, which are
	// unlinked as they are made; empty means the system's ($TMPDIR, else
	// /tmp). Default empty.
	ResponseTempDir string
	// BodyMinRate is the slowest a request may arrive, in bytes per
	// second, averaged from its start, after an allowance of
	// ReadHeaderTimeout, until its body is in (HTTP/1.1); a slower client
	// gets 408 and the connection closes. 0 means no rate check
	// (BodyTimeout alone). Default 1 KiB/s.
	BodyMinRate int64
	// MaxHeaderBytes is the largest request head (request line + headers)
	// accepted; larger gets 431. Default 16384.
	MaxHeaderBytes int
	// MaxConns caps concurrent client connections per listener. Default 100000.
	MaxConns int
	// ShutdownTimeout bounds draining on stop or upgrade. Default 30s.
	ShutdownTimeout time.Duration
}

// Listener is one listening address and the apps routed on it by Host.
type Listener struct {
	Addr string
	// TLS is nil for plain HTTP. When set, h2 is offered via ALPN.
	TLS *TLS
	// H2C: a plain listener also serves HTTP/2 with prior knowledge (a
	// connection opening with the HTTP/2 preface); every app on the
	// address says so (apps[].h2c).
	H2C bool
	// Apps served on this address, routed by Host. Default (may be nil) is
	// the app with no Hosts, which takes any unmatched Host.
	Apps    []*App
	Default *App
}

// TLS is a certificate/key pair loaded from files. The names are as the
// policy gave them, except that relative names are joined to the policy
// file's directory; Parse has checked that the pair loads.
type TLS struct {
	CertFile string
	KeyFile  string
	// OCSPFile is a DER OCSP response stapled to the handshake (empty:
	// none); LoadCertificate checks it.
	OCSPFile string
}

// Balance is the backend selection algorithm.
type Balance string

const (
	LeastLoaded Balance = "least_loaded" // fewest in-flight requests (default)
	RoundRobin  Balance = "round_robin"
	P2C         Balance = "p2c" // power of two choices on in-flight
)

// App is one web farm behind sentry.
type App struct {
	// Index is the app's position in Snapshot.Apps.
	Index int
	Name  string
	// Listen addresses (host:port). Default: 127.0.0.1:8080 for the first app.
	Listen []string
	// Hosts routes by the Host header (lower-case, without port; IPv6
	// literals keep their brackets, "[::1]", as in the header). Empty means
	// this app is the default on its listeners.
	Hosts []string
	TLS   *TLS
	// H2C: the app's (plain) listeners also serve HTTP/2 with prior
	// knowledge, cleartext (h2c: true). Default false: a connection opening
	// with the HTTP/2 preface gets 400. Apps sharing an address agree.
	H2C bool
	// TrustedProxies lists client networks whose X-Forwarded-* headers are
	// believed. Default none.
	TrustedProxies []netip.Prefix
	Backends       Backends
	Balance        Balance
	Health         Health
	Timeouts       Timeouts
	// MaxBodyBytes caps request bodies; 0 means unlimited. Default 0.
	MaxBodyBytes int64
	// RequestBufferingOff: bodies of this app are never buffered, they
	// stream to the backend as they arrive (request_buffering: off).
	// Default false (buffering on, up to server.request_buffer).
	RequestBufferingOff bool
	// ResponseBufferingOff: responses of this app are never buffered;
	// they go to the client as the backend sends them, holding its
	// connection meanwhile (response_buffering: off). Default false
	// (buffering on, up to server.response_buffer and the temporary
	// file).
	ResponseBufferingOff bool
	// MaxConnsPerBackend caps upstream connections per backend. Default 1024.
	MaxConnsPerBackend int
	// RequestIDHeader is the request ID header; an incoming value from a
	// trusted proxy is kept, otherwise a new ID is made. Default X-Request-Id.
	RequestIDHeader string
	// TraceContext is what sentry does with W3C Trace Context
	// (traceparent, tracestate): TracePass (the default) forwards them
	// unchanged and logs a valid traceparent's trace ID; TraceGenerate
	// also starts a trace for a request that comes without a valid one;
	// TraceOff leaves them alone (forwarded as any header, not read).
	TraceContext TraceContext
	Reject       Reject
	// Classes, most important first. Default: one class "default" (marked
	// Default) that takes every request, with period 0. Compiled by
	// classify.Compile at load time, so a bad rule is a policy error.
	// Methods are upper-cased, header names canonical and rule hosts
	// lower-cased.
	Classes []classify.ClassConfig
	// ServerTiming controls the backend's Server-Timing report.
	ServerTiming ServerTiming
	SLA          SLA
	// Estimator tunes service-time estimation. Parse and FromFlags fill
	// every field, Refresh included (it has no policy key), with the
	// library's default unless the policy sets it, so the snapshot shows
	// the values in use; estimator.New has accepted it with Classes' names.
	Estimator estimator.Config
	Admission Admission
	// Terminate holds each class's termination range (classes[].terminate),
	// parallel to Classes: nil for a class that does not declare one; nil
	// altogether when none does. See ClassTerminate and SertConfig.
	Terminate []*Terminate
	// Termination tunes the termination thresholds of the classes that
	// declare a range (termination.go).
	Termination Termination
	// Provisioning tunes the servers-needed advice (provisioning.go).
	Provisioning Provisioning
	// Partition is this sentry's share of the backends (provisioning.go).
	// Default: none (every backend).
	Partition Partition
	// Degradation is the load signal sent to the backends (degradation.go).
	// Default: off, header Sentry-Load.
	Degradation Degradation
}

// ServerTiming: what happens to the backend's Server-Timing header.
type ServerTiming struct {
	// Strip removes the cpu, io, db and queue entries before the response
	// reaches the client (other entries are kept). Default true.
	Strip bool
}

// SLA is the app's response-time objective (Cataclysm eq. 1–2).
type SLA struct {
	// Percentile the target applies to, in (0, 100). Default 95.
	Percentile float64
	// Targets is the QoS table: the target R_sla for the measured arrival
	// rate. Bands are sorted by Below; the last band has Below 0 (no upper
	// bound). Default: below 1000 req/s 1s, below 10000 req/s 2s, else 3s
	// (the paper's sample).
	Targets []SLABand
	// Revenue earned per admitted request that meets the target (eq. 2),
	// exported as a metric. 0 means none. Default 0.
	Revenue float64
}

// SLABand is one row of the QoS table.
type SLABand struct {
	// Below is the arrival rate (req/s, whole app) under which this band
	// applies; 0 means no upper bound (only the last band).
	Below float64
	// Target is R_sla in this band; > 0.
	Target time.Duration
}

// Target returns R_sla for an arrival rate.
func (s SLA) Target(rate float64) time.Duration {
	for _, b := range s.Targets {
		if b.Below == 0 || rate < b.Below {
			return b.Target
		}
	}
	if n := len(s.Targets); n > 0 {
		return s.Targets[n-1].Target
	}
	return time.Second
}

// Backends is a static list or a DNS name re-resolved periodically.
type Backends struct {
	// Static backend addresses, host:port.
	Static []string
	// DNS, when set, replaces Static.
	DNS *DNS
	// TLS, when set, makes sentry speak TLS to every backend
	// (backends.tls). Default nil: plain TCP.
	TLS *BackendTLS
	// Protocol is what sentry speaks to the backends: ProtoHTTP1
	// (default), ProtoH2C (HTTP/2 over cleartext, prior knowledge) or
	// ProtoH2 (HTTP/2 over TLS; needs TLS).
	Protocol string
}

// Engines (server.engine).
const (
	// EngineLoops serves HTTP/1.1, HTTP/1.1 over TLS 1.3 and h2 over TLS
	// 1.3 on event loops (epoll) where the system has them, Linux; on
	// other systems it is EnginePortable.
	EngineLoops = "loops"
	// EnginePortable serves every connection on goroutines (fasthttp
	// for HTTP/1.1, crypto/tls, sentry's h2 server on its goroutine
	// driver), on every system.
	EnginePortable = "portable"
)

// Backend protocols (backends.protocol).
const (
	ProtoHTTP1 = "http1"
	ProtoH2C   = "h2c"
	ProtoH2    = "h2"
)

// BackendTLS is how sentry connects to backends over TLS. The
// certificate files are read (and checked) when the policy loads.
type BackendTLS struct {
	// ServerName is the name sent in SNI and verified in the backend's
	// certificate. Default "": the backend address's host (an IP address
	// is then verified against the certificate's IP SANs, and sent no SNI).
	ServerName string
	// CAFile is a PEM file of the CAs that verify backends; "" (default)
	// means the system's roots.
	CAFile string
	// InsecureSkipVerify turns verification off (testing only). Default
	// false; cannot be combined with CAFile (ServerName is still sent as
	// the SNI).
	InsecureSkipVerify bool
	// CertFile and KeyFile are a client certificate for mutual TLS; both
	// or neither. Default none.
	CertFile, KeyFile string
}

// DNS backends: every A/AAAA record of Name, at Port.
type DNS struct {
	Name     string
	Port     uint16
	Interval time.Duration // default 5s
	// Server is the IP:port of the DNS server to ask (canonical form);
	// empty (the default) uses the system's resolver (/etc/resolv.conf).
	Server string
}

// Health configures active and passive health checking.
type Health struct {
	// Active is nil when active checks are off (the default).
	Active  *ActiveHealth
	Passive PassiveHealth
}

// ActiveHealth probes each backend with GET Path.
type ActiveHealth struct {
	Path     string        // default "/"
	Interval time.Duration // default 5s
	Timeout  time.Duration // default 1s
	Rise     int           // successes to mark up; default 2
	Fall     int           // failures to mark down; default 3
}

// PassiveHealth ejects a backend after consecutive failed relays.
type PassiveHealth struct {
	// Failures in a row that eject a backend; 0 disables. Default 3.
	Failures int
	// Cooldown is the longest an ejected backend stays out (lb.Options.
	// Cooldown: it is tried after a trial wait from 1 s, doubled by each
	// failed try up to Cooldown, at the first connection or passing
	// probe). Default 10s.
	Cooldown time.Duration
}

// Timeouts for the backend side.
type Timeouts struct {
	// Connect bounds dialing a backend; failure gives 502. Default 2s.
	Connect time.Duration
	// Response bounds waiting for the response head; expiry gives 504. Default 30s.
	Response time.Duration
}

// Reject configures the prebuilt rejection response.
type Reject struct {
	// Status is 503 (default) or 429.
	Status int
	// Body is sent as text/plain. Default "sentry: overloaded, retry later\n".
	Body string
	// RetryAfter is used when the algorithm predicts no drain time. Default 1s.
	RetryAfter time.Duration
	// GRPCStatus is the grpc-status of an admission rejection of a gRPC
	// request (content-type application/grpc...): GRPCUnavailable (14,
	// default; reject.grpc_status: unavailable) or GRPCResourceExhausted
	// (8; resource_exhausted). Never 0. Sentry's other overload answers to
	// gRPC (no backend, terminated, buffer full, backend busy) are always
	// 14, as they are always 503 (proxy/pipeline doc.go, "gRPC").
	GRPCStatus int
}

// gRPC status codes a rejection may carry (google.golang.org/grpc/codes).
const (
	GRPCResourceExhausted = 8
	GRPCUnavailable       = 14
)

// Admission selects and tunes admission control.
type Admission struct {
	// Mode: auto (default: batch, switching to threshold when sentry's own
	// CPU saturates, and to adaptive when the batch model is known to be
	// wrong; see Fallback), batch, threshold, adaptive or off (admit
	// everything).
	Mode string
	// Reserve holds room for the predicted demand of more important
	// classes: class j is tested against what their demand over the next
	// SLA window leaves (batchac doc, Priority). Default true; false tests
	// each class against the present load alone, first come, first served.
	Reserve bool
	// ReserveFloor is the least share of the more important classes'
	// budget held for them while they are quiet, in [0, 1). Default 0.25.
	// It limits how deep less important classes queue, never throughput:
	// a free slot is always filled.
	ReserveFloor float64
	Batch        BatchAdmission
	Threshold    ThresholdAdmission
	Switch       ModeSwitch
	Adaptive     AdaptiveAdmission
	Fallback     Fallback
	FairShare    FairShare
}

// FairShare shares each class's capacity among its clients (package
// fairshare; docs/algorithms.md §12): while a class sheds, clients over
// their max-min fair share are shed first, in turns that rotate over
// Rotate, and clients within it are shed only when the class admits less
// than their demand.
type FairShare struct {
	// Enabled turns fair sharing on. Default true.
	Enabled bool
	// Client names where a client's identity is read: "address" (the
	// client address after trusted_proxies; default), "header", "cookie",
	// or "jwt_claim" (a claim of the bearer token in Authorization, read
	// without verifying the token). A request without it is named by its
	// address.
	Client string
	// Name is the header or cookie name, or the claim (jwt_claim;
	// default "sub"). Required for header and cookie.
	Name string
	// IPv6Prefix: IPv6 clients are named by their first IPv6Prefix bits,
	// 1–128. Default 64.
	IPv6Prefix int
	// MaxClients is the size of the client table (clients tracked at once,
	// per class a client is active in); a new client takes the slot of
	// the least active one. 64–4194304; default 16384.
	MaxClients int
	// Rotate is the period over which the turns of clients over their
	// share rotate (DAGOR's user priority). At least 1s; default 10m.
	Rotate time.Duration
}

// The admission.fair_share.client values.
const (
	FairClientAddress = "address"
	FairClientHeader  = "header"
	FairClientCookie  = "cookie"
	FairClientJWT     = "jwt_claim"
)

// Identity is the client identity the section names (fairshare.Identity).
func (f FairShare) Identity() fairshare.Identity {
	src, _ := fairshare.ParseSource(f.Client)
	return fairshare.Identity{From: src, Name: f.Name, IPv6Prefix: f.IPv6Prefix}
}

// AdaptiveAdmission tunes adaptive mode: SEDA's response-time controller
// (Welsh & Culler §3.2–3.3, package adaptive). The percentile and the
// target come from the app's SLA (sla.percentile and R_sla). Defaults are
// the paper's (Fig. 4), except RateMax (5000, not 2000) and the two
// decisions marked.
type AdaptiveAdmission struct {
	NReq        int           // completions of a class that run its controller; default 100
	Timeout     time.Duration // run anyway after this, given one sample; default 1s
	Alpha       float64       // EWMA constant of the percentile, in (0, 1); default 0.7
	ErrD        float64       // err above it cuts the rate; default 0
	ErrI        float64       // err at or below it raises the rate; < 0 and < ErrD; default -0.5
	AdjD        float64       // multiplicative decrease, > 1; default 1.2
	AdjI        float64       // additive increase weight, > 0; default 2
	CI          float64       // increase is AdjI·(−(err − CI)); < 0; default -0.1
	RateMin     float64       // requests per second, > 0; default 0.05
	RateMax     float64       // requests per second, ≥ RateMin; default 5000
	AdjLo       float64       // divides a less important class's rate, > 1; default 10
	LCThresh    int           // runs with all lower classes at RateMin before a class cuts itself; default 20
	CutAllLower bool          // the paper's rule: cut every lower class at once; default false (decision)
	Burst       time.Duration // token bucket depth in time at the rate, > 0; default 100ms (decision)
	InitialRate float64       // rate before the first run; 0 means RateMax; default 0
	// Shared: one controller and one token bucket for every class (the
	// paper's baseline, a single controller against one per class):
	// classes are admitted alike and the target is the smallest. Default
	// false (a controller per class, the multiclass rules).
	Shared bool
	// Rule: "scaled" (default; decision: increases proportional to the
	// rate and capped by the offered rate, cuts from the measured
	// completion rate, lower classes cut by AdjD rather than AdjLo) or
	// "paper" (Welsh & Culler's absolute additive increase and flat cuts).
	// docs/algorithms.md §7 and package adaptive's doc.go give both.
	Rule string
	// InFlightLimit: besides its class's token, a request needs the farm
	// to hold fewer requests admitted and not completed than its
	// completion rate × R_sla × 1/(−ln(1 − p/100)) (p the SLA percentile;
	// Little's law: the mean response time whose p-th percentile is R_sla
	// for an exponential distribution), at least 10 (package adaptive,
	// "The in-flight limit"). Default true; false: the token buckets
	// alone, as the paper.
	InFlightLimit bool
}

// The admission.adaptive.rule values.
const (
	AdaptiveRuleScaled = "scaled"
	AdaptiveRulePaper  = "paper"
)

// Fallback says when auto mode leaves batch mode for adaptive mode and
// when it returns (package control's doc.go gives the rule). Windows are
// control's one-second measurement intervals.
type Fallback struct {
	// Enabled lets auto fall back to adaptive. Default true.
	Enabled bool
	// MissWindows: consecutive windows in which batch mode admitted
	// requests (by its test) and the admitted percentile missed R_sla, or
	// most responses carried no usable service time. Default 3.
	MissWindows int
	// NoTimingShare is the share of responses without a usable service
	// time (no Server-Timing cpu/io and no measured time) above which a
	// window counts against the model, in (0, 1]. Default 0.5.
	NoTimingShare float64
	// ReturnWindows: consecutive calm windows in adaptive mode (the
	// percentile within ReturnRatio·R_sla, service times usable and in
	// agreement with the estimates) before auto returns to batch; a
	// fall-back within a minute of a return doubles it, up to 16×.
	// Default 3.
	ReturnWindows int
	// ReturnRatio: a window is calm when the admitted percentile is at
	// most ReturnRatio·R_sla, in (0, 1]. Default 0.8.
	ReturnRatio float64
}

// BatchAdmission tunes batch mode (Cataclysm §3.1–3.2, package batchac).
type BatchAdmission struct {
	// QueueCap caps each class×bucket wait queue; an arrival beyond it is
	// rejected at once. Default 1024.
	QueueCap int
	// AllOrNothing keeps the paper's rule (a failing bucket is dropped
	// whole) instead of admitting its largest passing prefix. Default false.
	AllOrNothing bool
	// StrictPeriods makes every request of a class with a period wait for
	// its class's next run, as the paper has it. Default false: an arrival
	// is admitted at once when nothing of its class waits and a batch of
	// one passes its run's test (package batchac, Early admission).
	StrictPeriods bool
	// ImpliedQueue makes the test charge at least the backend queue the
	// in-flight count implies, not only the measured Q, which lags a load
	// step (package batchac, The queue at a load step). Default true;
	// false keeps the paper's test.
	ImpliedQueue bool
	// Parallelism is P, the requests one backend serves at full speed in
	// parallel (worker slots); ≥ 1. 0 means learn it from observed response
	// times, starting at 1. Default 0.
	Parallelism float64
}

// ThresholdAdmission tunes threshold mode (§3.3, package thresholdac).
type ThresholdAdmission struct {
	// Recompute is how often (i, p) is recomputed. Default 1s.
	Recompute time.Duration
	// Capacity is one backend's capacity in server-seconds per second
	// (K = n × Capacity). 0 means learn it from what batch mode sustained
	// within the SLA. Default 0.
	Capacity float64
}

// ModeSwitch tunes the CPU-driven switch between batch and threshold (§4).
type ModeSwitch struct {
	CPUHigh     float64       // default 0.85
	CPULow      float64       // default 0.6
	Hold        time.Duration // default 2s
	RevertAfter time.Duration // default 30s
}

// TraceContext is an app's trace_context: pass, generate or off
// (docs/tracing.md).
type TraceContext string

const (
	TracePass     TraceContext = "pass"
	TraceGenerate TraceContext = "generate"
	TraceOff      TraceContext = "off"
)
