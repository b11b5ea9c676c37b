package pipeline

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sentry-proxy/sentry/admission"
)

func TestIsGRPC(t *testing.T) {
	for _, c := range []struct {
		ct   string
		want bool
	}{
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc+json", true},
		{"application/grpc;charset=utf-8", true},
		{"application/grpc+", true}, // grpc-go accepts an empty codec name too
		{"Application/GRPC", true},
		{" application/grpc\t", true},
		{"application/grpc-web", false},
		{"application/grpc-web+proto", false},
		{"application/grpcx", false},
		{"application/grp", false},
		{"application/json", false},
		{"", false},
		{"application/grpc ;", false}, // space before ';' is not the grammar
		{"xapplication/grpc", false},
	} {
		if got := IsGRPC([]byte(c.ct)); got != c.want {
			t.Errorf("IsGRPC(%q) = %v, want %v", c.ct, got, c.want)
		}
	}
}

// isGRPCRef is IsGRPC written with the strings package, the oracle of
// FuzzIsGRPC.
func isGRPCRef(s string) bool {
	s = strings.Trim(s, " \t")
	const base = "application/grpc"
	if len(s) < len(base) || !strings.EqualFold(s[:len(base)], base) {
		return false
	}
	rest := s[len(base):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

func FuzzIsGRPC(f *testing.F) {
	for _, s := range []string{"application/grpc", "application/grpc+proto", "application/grpc;a=b", "application/grpc-web", " APPLICATION/grpc ", "application/grpc\x00", "application/grpc\u212a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := IsGRPC([]byte(s))
		if want := isGRPCRef(s); got != want {
			t.Fatalf("IsGRPC(%q) = %v, reference says %v", s, got, want)
		}
		// What grpc-go itself calls gRPC (exact prefix, then '+' or ';')
		// is always gRPC here.
		if s == "application/grpc" || (strings.HasPrefix(s, "application/grpc") && (s[16] == '+' || s[16] == ';')) {
			if !got {
				t.Fatalf("IsGRPC(%q) = false for a content-type grpc-go accepts", s)
			}
		}
	})
}

func TestAppendGRPCMessage(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"sentry: overloaded, retry later", "sentry: overloaded, retry later"},
		{"100% busy", "100%25 busy"},
		{"a\nb\x7f", "a%0Ab%7F"},
		{"héllo", "h%C3%A9llo"},
	} {
		got := string(AppendGRPCMessage(nil, c.in))
		if got != c.want {
			t.Errorf("AppendGRPCMessage(%q) = %q, want %q", c.in, got, c.want)
		}
		// gRPC's decoding is percent-decoding: the text comes back.
		if back, err := url.PathUnescape(got); err != nil || back != c.in {
			t.Errorf("%q decodes to %q (%v)", got, back, err)
		}
	}
}

// TestReplyForGRPC: a gRPC request's 503-class answers are HTTP 200 with
// a grpc-status (the app's for admission, 14 otherwise), a message, and
// a pushback of the same wait as Retry-After in milliseconds (not rounded
// to seconds); other outcomes keep their HTTP answer; a plain request
// keeps its 503 and Retry-After.
func TestReplyForGRPC(t *testing.T) {
	ra := &App{Reject: RejectResponse{Status: 429, Body: []byte("busy\n"), RetryAfter: 3, GRPCStatus: 8}}
	d := admission.Decision{Verdict: admission.RejectTest, RetryAfter: 1234500 * time.Microsecond}
	if r := ReplyFor(ra, OutRejected, d, false); r.Status != 429 || r.Retry != 2 || r.GRPC != 0 || string(r.Body) != "busy\n" {
		t.Errorf("plain rejection %+v, want 429, Retry-After 2 (1.2345s up), the app's body", r)
	}
	r := ReplyFor(ra, OutRejected, d, true)
	if r.Status != 200 || r.GRPC != 8 || r.Pushback != 1235 || r.Retry != -1 || r.Body != nil ||
		string(r.GRPCMessage) != "sentry: overloaded, retry later" || string(r.Verdict) != admission.RejectTest.String() {
		t.Errorf("gRPC rejection %+v, want 200, grpc-status 8, pushback 1235 ms, no body, the verdict", r)
	}
	// No predicted drain: reject.retry_after, in ms.
	if r := ReplyFor(ra, OutRejected, admission.Decision{Verdict: admission.RejectTest}, true); r.Pushback != 3000 || r.GRPC != 8 {
		t.Errorf("gRPC rejection without a drain %+v, want pushback 3000", r)
	}
	// Not the client's rate: always UNAVAILABLE, its own message.
	r = ReplyFor(ra, OutRejected, admission.Decision{Verdict: admission.RejectNoBackend, RetryAfter: 20 * time.Millisecond}, true)
	if r.GRPC != 14 || r.Pushback != 20 || string(r.GRPCMessage) != "sentry: no healthy backend" {
		t.Errorf("no_backend verdict %+v, want 14, pushback 20, no-backend message", r)
	}
	for _, o := range []Outcome{OutNoBackend, OutBackendBusy, OutBufferFull, OutTerminated} {
		r := ReplyFor(ra, o, admission.Decision{}, true)
		plain := ReplyFor(ra, o, admission.Decision{}, false)
		if r.Status != 200 || r.GRPC != 14 || r.Pushback != int64(plain.Retry)*1000 || len(r.GRPCMessage) == 0 || r.Body != nil {
			t.Errorf("%s: %+v, want 200, grpc-status 14, pushback %d ms", OutcomeReason[o], r, plain.Retry*1000)
		}
	}
	for _, o := range []Outcome{OutBackendFailed, OutBackendTimeout, OutBadRequest, OutNoApp, OutBodyTooLarge, OutMethodNotAllowed} {
		if r := ReplyFor(ra, o, admission.Decision{}, true); r.GRPC != 0 || r.Status != StatusOf(o) {
			t.Errorf("%s: %+v, want the plain %d", OutcomeReason[o], r, StatusOf(o))
		}
	}
	// No app (a Host no app serves) and an app whose code is unset.
	if r := ReplyFor(nil, OutNoBackend, admission.Decision{}, true); r.GRPC != 14 {
		t.Errorf("no app: %+v", r)
	}
}

func TestPushbackMs(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Microsecond, 1}, {time.Millisecond, 1}, {1001 * time.Microsecond, 2}, {2 * time.Second, 2000}} {
		if got := PushbackMs(c.d); got != c.want {
			t.Errorf("PushbackMs(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}
