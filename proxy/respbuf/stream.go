package respbuf

// Streams tells whether a response must go to its client as it comes,
// never held back: its Content-Type value ct is text/event-stream (server
// events, which a buffer would hold until its end) or application/grpc
// with any suffix (gRPC and gRPC-Web, whose messages are a stream), or
// the backend said "X-Accel-Buffering: no" (accel: its value; nginx's
// convention, which it honours too). Media types are compared without
// regard to ASCII case, parameters and whitespace ignored. Upgrades (101)
// never reach a buffer: they are tunnels, relayed elsewhere.
func Streams(ct, accel []byte) bool {
	if len(accel) > 0 && eqFold(trim(accel), "no") {
		return true
	}
	ct = trim(ct)
	return hasPrefixFold(ct, "text/event-stream") && (len(ct) == 17 || ct[17] == ';' || ct[17] == ' ' || ct[17] == '\t') ||
		hasPrefixFold(ct, "application/grpc")
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func hasPrefixFold(b []byte, s string) bool {
	if len(b) < len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

func eqFold(b []byte, s string) bool { return len(b) == len(s) && hasPrefixFold(b, s) }
