package classify

import (
	"bytes"
	"errors"
	"path"
	"strings"
	"unsafe"
)

// glob is a compiled PathGlob: the pattern split at '/', where a segment
// "**" matches zero or more whole path segments and any other segment is
// matched against exactly one path segment with path.Match.
type glob struct {
	segs []globSeg
}

type globSeg struct {
	pat     string
	literal bool // no meta characters: compare bytes
	star2   bool // the "**" segment
}

func compileGlob(p string) (glob, error) {
	if p == "" {
		return glob{}, errors.New("empty pattern")
	}
	var g glob
	for _, s := range strings.Split(p, "/") {
		if s == "**" {
			if n := len(g.segs); n > 0 && g.segs[n-1].star2 {
				continue // "**/**" is "**"
			}
			g.segs = append(g.segs, globSeg{pat: s, star2: true})
			continue
		}
		if _, err := path.Match(s, ""); err != nil {
			return glob{}, errors.New("syntax error in pattern")
		}
		g.segs = append(g.segs, globSeg{pat: s, literal: !strings.ContainsAny(s, `*?[\`)})
	}
	return g, nil
}

func (s *globSeg) match(b []byte) bool {
	if s.literal {
		return string(b) == s.pat
	}
	// path.Match does not retain its argument, so a zero-copy view is safe.
	ok, _ := path.Match(s.pat, unsafe.String(unsafe.SliceData(b), len(b)))
	return ok
}

// match reports whether p matches. It is the classic single-star wildcard
// algorithm lifted to segments: "**" is the star, a segment pattern the
// element predicate, so backtracking to the last "**" alone is complete.
// It runs in O(segments(p) × segments(pattern)) and never allocates.
func (g *glob) match(p []byte) bool {
	segs := g.segs
	pi, off := 0, 0 // pattern segment index; byte offset of the current path segment
	starPi, starOff := -1, 0
	for {
		if off > len(p) { // every path segment consumed
			for pi < len(segs) && segs[pi].star2 {
				pi++
			}
			return pi == len(segs)
		}
		end := len(p)
		if i := bytes.IndexByte(p[off:], '/'); i >= 0 {
			end = off + i
		}
		if pi < len(segs) {
			if segs[pi].star2 {
				starPi, starOff = pi, off
				pi++
				continue
			}
			if segs[pi].match(p[off:end]) {
				pi++
				off = end + 1
				continue
			}
		}
		if starPi < 0 {
			return false
		}
		// Let the last "**" absorb one more segment and retry after it.
		if i := bytes.IndexByte(p[starOff:], '/'); i >= 0 {
			starOff += i + 1
		} else {
			starOff = len(p) + 1
		}
		pi, off = starPi+1, starOff
	}
}
