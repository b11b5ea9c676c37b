package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem found in a policy, located by file, line and
// column. Line is 0 when the problem has no line (for example a policy
// built from command-line flags, or a YAML syntax error the parser could
// not place); Column is 0 when only the line is known.
type Error struct {
	File   string
	Line   int
	Column int
	// Msg is the message, with the path of the key at fault first
	// ("apps[0].timeouts.connect: ...") and any did-you-mean hint in it.
	Msg string
	// Suggest is the word the did-you-mean hint suggests (a key or an
	// enum value), or "".
	Suggest string
}

// Error formats e as "FILE:LINE:COLUMN: msg", leaving out what is not
// known ("FILE:LINE: msg", "FILE: msg").
func (e Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one policy, sorted by line. Parse, Load
// and FromFlags return an Errors value (never an empty one) when the policy
// is invalid, so callers can print it whole or range over it.
type Errors []Error

// Error formats one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// maxErrors bounds how many problems one policy reports; beyond it the
// policy is hopeless and a longer list helps nobody.
const maxErrors = 200

// collector gathers errors for one file.
type collector struct {
	file string
	errs Errors
	full bool
	// seen drops repeats, which aliases and merges can cause.
	seen map[string]bool
	// reports counts every call of add, kept or dropped, so a section can
	// tell whether it reported anything (see reported).
	reports int
}

func (c *collector) add(p pos, format string, args ...any) {
	c.addHint(p, "", format, args...)
}

// addHint is add with a did-you-mean suggestion (Error.Suggest).
func (c *collector) addHint(p pos, suggest, format string, args ...any) {
	c.reports++
	if c.full {
		return
	}
	msg := clipValues(fmt.Sprintf(format, args...))
	k := strconv.Itoa(p.line) + ":" + strconv.Itoa(p.col) + ":" + msg
	if c.seen[k] {
		return
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[k] = true
	if len(c.errs) == maxErrors {
		c.errs = append(c.errs, Error{File: c.file, Msg: fmt.Sprintf("too many errors (more than %d); fix these first", maxErrors)})
		c.full = true
		return
	}
	c.errs = append(c.errs, Error{File: c.file, Line: p.line, Column: p.col, Msg: msg, Suggest: suggest})
}

// reported tells whether anything was reported since mark was taken from
// c.reports: a section that failed is then skipped by the checks that would
// only add follow-on errors.
func (c *collector) reported(mark int) bool { return c.reports != mark }

// err returns the collected errors sorted by line, or nil.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	out := make(Errors, len(c.errs))
	copy(out, c.errs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// Long values in messages. A policy value can be megabytes (a 20 MB host
// name was echoed in full); a message quotes at most keptBytes of it.
const (
	keptBytes = 64   // of a quoted value or a long word kept in a message
	longWord  = 128  // an unquoted run of non-space bytes longer than this is clipped
	maxMsg    = 1024 // a message still longer keeps its head and tail
)

// clipValues shortens what a message quotes, wherever the value came from
// (the decoder, a library's error): every Go-quoted string literal whose
// value is longer than keptBytes becomes the quoted first keptBytes (cut
// on a UTF-8 boundary) followed by …(N bytes), N the value's length; an
// unquoted word longer than longWord (such as an integer literal) keeps its
// first keptBytes the same way; and a message still longer than maxMsg
// keeps its head and tail around …(N bytes)…. Messages are built once per
// problem and there are at most maxErrors of them, so this costs nothing
// on valid policies.
func clipValues(msg string) string {
	if len(msg) <= keptBytes {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); {
		switch c := msg[i]; {
		case c == '"':
			lit, err := strconv.QuotedPrefix(msg[i:])
			if err != nil {
				b.WriteByte(c)
				i++
				continue
			}
			i += len(lit)
			v, err := strconv.Unquote(lit)
			if err != nil || len(v) <= keptBytes {
				b.WriteString(lit)
				continue
			}
			b.WriteString(strconv.Quote(utf8Prefix(v, keptBytes)))
			fmt.Fprintf(&b, "…(%d bytes)", len(v))
		case c == ' ' || c == '\n' || c == '\t':
			b.WriteByte(c)
			i++
		default:
			j := i
			for j < len(msg) && msg[j] != ' ' && msg[j] != '\n' && msg[j] != '\t' && msg[j] != '"' {
				j++
			}
			if w := msg[i:j]; len(w) > longWord {
				b.WriteString(utf8Prefix(w, keptBytes))
				fmt.Fprintf(&b, "…(%d bytes)", len(w))
			} else {
				b.WriteString(w)
			}
			i = j
		}
	}
	out := b.String()
	if len(out) > maxMsg {
		head := utf8Prefix(out, maxMsg/2)
		tail := out[len(out)-maxMsg/2:]
		for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
			tail = tail[1:]
		}
		out = head + fmt.Sprintf("…(%d bytes)…", len(out)) + tail
	}
	return out
}

// utf8Prefix returns at most n bytes of s, not splitting a UTF-8 sequence.
func utf8Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
