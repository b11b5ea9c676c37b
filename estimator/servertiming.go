package estimator

import (
	"math"
	"strconv"
	"time"
	"unsafe"
)

// Timing is what a backend reported in its Server-Timing response header.
type Timing struct {
	// CPU is the sum of every cpu;dur= entry.
	CPU time.Duration
	// IO is the sum of every io;dur= and db;dur= entry (report one of the
	// two names, or repeat an entry once per query: entries add up).
	IO time.Duration
	// Queue is the sum of every queue;dur= entry.
	Queue time.Duration
	// HasCPU, HasIO and HasQueue tell which entries carried a valid dur.
	HasCPU, HasIO, HasQueue bool
}

// HasS reports whether t carries a service time (cpu or io).
func (t Timing) HasS() bool { return t.HasCPU || t.HasIO }

// S returns the inherent service time cpu + α·io (Cataclysm eq. 3).
func (t Timing) S(alpha float64) time.Duration {
	return t.CPU + time.Duration(alpha*float64(t.IO))
}

// maxDurMs bounds a dur= value: one day, in milliseconds. Larger values are
// treated as invalid rather than overflowing a Duration.
const maxDurMs = 24 * 3600 * 1000

// ParseServerTiming parses one Server-Timing header value (RFC-style list:
// `cpu;dur=12.5, db;dur=3;desc="q, x", queue;dur=0.4`). Metric names are
// matched case-insensitively; dur is in milliseconds. Entries with a missing,
// negative, non-finite or over-one-day dur are ignored. ok reports whether
// any cpu, io, db or queue entry was found. For several header lines, call
// it once per line and add the fields. It does not allocate.
func ParseServerTiming(v []byte) (t Timing, ok bool) {
	t, ok, _ = scanServerTiming(nil, v, false)
	return t, ok
}

// StripServerTiming appends to dst the entries of the Server-Timing value v
// that are not cpu, io, db or queue metrics, byte for byte and in order,
// joined with ", ", and returns the extended slice. When nothing is kept it
// returns dst unchanged, and the caller should drop the header. It does not
// allocate when dst has room for len(v) more bytes.
func StripServerTiming(dst, v []byte) []byte {
	_, _, dst = scanServerTiming(dst, v, true)
	return dst
}

// ParseStripServerTiming does ParseServerTiming and StripServerTiming in one
// pass over v, for the proxy that needs both.
func ParseStripServerTiming(dst, v []byte) (t Timing, ok bool, out []byte) {
	return scanServerTiming(dst, v, true)
}

func scanServerTiming(dst, v []byte, strip bool) (t Timing, ok bool, out []byte) {
	n0 := len(dst)
	for len(v) > 0 {
		i := entryEnd(v)
		raw := trim(v[:i])
		if i < len(v) {
			i++
		}
		v = v[i:]
		name, params := splitEntry(raw)
		m := metricOf(name)
		if m == metricOther {
			if strip && len(raw) > 0 {
				if len(dst) > n0 {
					dst = append(dst, ", "...)
				}
				dst = append(dst, raw...)
			}
			continue
		}
		d, valid := durParam(params)
		if !valid {
			continue
		}
		switch m {
		case metricCPU:
			t.CPU += d
			t.HasCPU = true
		case metricIO:
			t.IO += d
			t.HasIO = true
		case metricQueue:
			t.Queue += d
			t.HasQueue = true
		}
		ok = true
	}
	return t, ok, dst
}

// entryEnd returns the index of the first comma outside a quoted string in
// v, or len(v). An unterminated quoted string runs to the end of v.
func entryEnd(v []byte) int {
	for i, c := range v {
		if c == ',' {
			return i
		}
		if c == '"' {
			return scanQuoted(v, ',')
		}
	}
	return len(v)
}

// splitEntry splits a trimmed entry into its metric name and the text after
// the first ';'.
func splitEntry(raw []byte) (name, params []byte) {
	for j, c := range raw {
		if c == ';' {
			return trim(raw[:j]), raw[j+1:]
		}
	}
	return raw, nil
}

type metric uint8

const (
	metricOther metric = iota
	metricCPU
	metricIO
	metricQueue
)

// scanQuoted returns the index of the first sep outside a quoted string
// (with backslash escapes), or len(v).
func scanQuoted(v []byte, sep byte) int {
	inQ := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inQ {
			if c == '\\' {
				i++
			} else if c == '"' {
				inQ = false
			}
			continue
		}
		if c == '"' {
			inQ = true
		} else if c == sep {
			return i
		}
	}
	return len(v)
}

func metricOf(name []byte) metric {
	switch len(name) {
	case 2:
		if lower(name[0]) == 'i' && lower(name[1]) == 'o' || lower(name[0]) == 'd' && lower(name[1]) == 'b' {
			return metricIO
		}
	case 3:
		if lower(name[0]) == 'c' && lower(name[1]) == 'p' && lower(name[2]) == 'u' {
			return metricCPU
		}
	case 5:
		if equalFoldLower(name, "queue") {
			return metricQueue
		}
	}
	return metricOther
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func equalFoldLower(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// durParam finds the first dur parameter in an entry's parameters and
// converts it from milliseconds.
func durParam(p []byte) (time.Duration, bool) {
	for len(p) > 0 {
		// One parameter: name [= value], value a token or quoted string.
		j := len(p)
		for k, c := range p {
			if c == ';' {
				j = k
				break
			}
			if c == '"' {
				j = scanQuoted(p, ';')
				break
			}
		}
		param := p[:j]
		if j < len(p) {
			p = p[j+1:]
		} else {
			p = nil
		}
		eq := -1
		for k, c := range param {
			if c == '=' {
				eq = k
				break
			}
		}
		if eq < 0 || !equalFoldLower(trim(param[:eq]), "dur") {
			continue
		}
		val := trim(param[eq+1:])
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		ms, ok := parseMs(val)
		if !ok || !(ms >= 0 && ms <= maxDurMs) {
			return 0, false
		}
		return time.Duration(ms * float64(time.Millisecond)), true
	}
	return 0, false
}

var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// parseMs parses a dur value. The usual form, digits with an optional
// fraction and at most 15 digits in all, is converted by hand (exactly: one
// correctly rounded division of two exact doubles); anything else goes to
// strconv.ParseFloat.
func parseMs(val []byte) (float64, bool) {
	if len(val) == 0 || len(val) > 32 {
		return 0, false
	}
	var n uint64
	digits, fracDigits, dot := 0, 0, false
	for _, c := range val {
		switch {
		case '0' <= c && c <= '9':
			n = n*10 + uint64(c-'0')
			digits++
			if dot {
				fracDigits++
			}
		case c == '.' && !dot:
			dot = true
		default:
			digits = 99 // not the simple form
		}
	}
	if digits > 0 && digits <= 15 {
		return float64(n) / pow10[fracDigits], true
	}
	// ParseFloat does not retain its argument; errors (which would allocate)
	// are only possible on malformed input.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(val), len(val)), 64)
	return f, err == nil && !math.IsNaN(f)
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func trim(b []byte) []byte {
	for len(b) > 0 && isOWS(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isOWS(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
