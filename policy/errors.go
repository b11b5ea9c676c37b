package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem found in a policy, located by file and line.
// Line is 0 when the problem has no line (for example a policy built from
// command-line flags, or a YAML syntax error the parser could not place).
type Error struct {
	File string
	Line int
	Msg  string
}

// Error formats e as "FILE:LINE: msg" (or "FILE: msg" when Line is 0).
func (e Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
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

func (c *collector) add(line int, format string, args ...any) {
	c.reports++
	if c.full {
		return
	}
	msg := fmt.Sprintf(format, args...)
	k := strconv.Itoa(line) + ":" + msg
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
	c.errs = append(c.errs, Error{File: c.file, Line: line, Msg: msg})
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
