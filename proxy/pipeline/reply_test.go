package pipeline

import (
	"testing"
)

// TestAppendReplyFieldsAllocs: the fields of a reply, a Retry-After past
// RetryAfterBytes' table included, are written into the caller's kept
// scratch without allocating, and with the right values.
func TestAppendReplyFieldsAllocs(t *testing.T) {
	date, rid, id := []byte("Mon, 07 Dec 2026 00:00:00 GMT"), []byte("X-Request-Id"), []byte("abc")
	for _, tc := range []struct {
		name string
		r    Reply
		want map[string]string
	}{
		{"reject", Reply{Status: 503, Retry: 2, Body: []byte("busy")},
			map[string]string{"Retry-After": "2", "Content-Length": "4"}},
		{"reject long wait", Reply{Status: 429, Retry: 300, Body: []byte("overloaded")},
			map[string]string{"Retry-After": "300", "Content-Length": "10"}},
		{"grpc", Reply{Status: 200, Retry: -1, GRPC: 14, GRPCMessage: []byte("busy"), Pushback: 300000},
			map[string]string{"Grpc-Retry-Pushback-Ms": "300000", "Content-Length": "0"}},
	} {
		var f []Field
		var num []byte
		write := func() { f, num = AppendReplyFields(f[:0], num, &tc.r, date, rid, id) }
		write()
		got := map[string]string{}
		for _, x := range f {
			got[string(x.Name)] = string(x.Value)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s %q, want %q (fields %q)", tc.name, k, got[k], v, got)
			}
		}
		if n := testing.AllocsPerRun(100, write); n != 0 {
			t.Errorf("%s: %v allocations per reply, want 0", tc.name, n)
		}
	}
}
