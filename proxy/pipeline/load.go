package pipeline

import (
	"strconv"
	"time"
)

// load.go: the degradation signal (docs/policy.md "degradation"): sentry
// tells the backends how close to its limit the farm is, so that they can
// serve a cheaper variant. The header is one more entry of the header
// policy (headers.go): incoming copies are dropped in every spelling, and
// sentry sets exactly one on each admitted request, never on a rejected
// one (nothing reaches a backend then).

// LoadSource gives the farm's load as sentry models it (package control's
// App.Load): cheap, read from an atomic, never a lock per request.
type LoadSource interface {
	Load(now time.Time) float64
}

// DropIncoming reports whether a client's header name is the app's load
// header, exactly or with '_' for '-': every engine drops it from the
// request before forwarding (a client must not forge the signal, nor a
// CGI-style backend read Sentry_Load as HTTP_SENTRY_LOAD).
func (a *App) DropIncoming(name []byte) bool {
	if a.LoadHeader == "" {
		return false
	}
	exact, alias := NameMatch(name, a.LoadHeader)
	return exact || alias
}

// AppendLoad appends the load header's value for an admitted request of
// class to dst: the load with two decimals, then "; class=" and the
// class's name, e.g. "0.93; class=bronze" (a backend that only wants the
// number reads up to ';'). Call it only when a.Load is not nil. It does
// not allocate when dst has room.
func (a *App) AppendLoad(dst []byte, class int, now time.Time) []byte {
	v := a.Load.Load(now)
	if !(v >= 0) {
		v = 0
	}
	dst = strconv.AppendFloat(dst, v, 'f', 2, 64)
	if a.Controller != nil {
		if names := a.Controller.Classes(); class >= 0 && class < len(names) {
			dst = append(append(dst, "; class="...), names[class]...)
		}
	}
	return dst
}
