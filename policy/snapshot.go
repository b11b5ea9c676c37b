package policy

import (
	"net/netip"
	"time"
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
}

// Log configures hclog.
type Log struct {
	// Level: trace, debug, info (default), warn, error.
	Level string
	// Format: text (default) or json.
	Format string
	// Access enables one log line per request at info level. Default false.
	Access bool
}

// Server holds front-end settings shared by every listener.
type Server struct {
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request body once its headers are in.
	// Default 5m.
	BodyTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 60s.
	IdleTimeout time.Duration
	// WriteTimeout bounds writing a response to the client; 0 means none
	// (needed for long downloads). Default 0.
	WriteTimeout time.Duration
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
	// TrustedProxies lists client networks whose X-Forwarded-* headers are
	// believed. Default none.
	TrustedProxies []netip.Prefix
	Backends       Backends
	Balance        Balance
	Health         Health
	Timeouts       Timeouts
	// MaxBodyBytes caps request bodies; 0 means unlimited. Default 0.
	MaxBodyBytes int64
	// MaxConnsPerBackend caps upstream connections per backend. Default 1024.
	MaxConnsPerBackend int
	// RequestIDHeader is the request ID header; an incoming value from a
	// trusted proxy is kept, otherwise a new ID is made. Default X-Request-Id.
	RequestIDHeader string
	Reject          Reject
	Admission       Admission
}

// Backends is a static list or a DNS name re-resolved periodically.
type Backends struct {
	// Static backend addresses, host:port.
	Static []string
	// DNS, when set, replaces Static.
	DNS *DNS
}

// DNS backends: every A/AAAA record of Name, at Port.
type DNS struct {
	Name     string
	Port     uint16
	Interval time.Duration // default 5s
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
	// Cooldown is how long an ejected backend stays out. Default 10s.
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
}

// Admission selects the admission mode. Later issues add its parameters.
type Admission struct {
	// Mode: off (default for now).
	Mode string
}
