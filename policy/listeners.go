package policy

import (
	"fmt"
	"net"
)

// finish runs the checks that need the whole policy (unique names, one
// default app per address, hosts unique per address, consistent TLS,
// non-overlapping addresses) and derives s.Listeners. It runs even when
// decoding found errors, on what decoded cleanly, so that one pass reports
// everything; the meta flags keep a broken section from causing follow-on
// errors here.
func finish(s *Snapshot, m *meta, c *collector) {
	label := func(i int) string {
		if s.Apps[i].Name != "" {
			return fmt.Sprintf("app %q", s.Apps[i].Name)
		}
		return m.apps[i].path
	}
	at := func(p, fallback pos) pos {
		if p.line > 0 {
			return p
		}
		return fallback
	}

	names := map[string]int{}
	for i, a := range s.Apps {
		if a.Name == "" {
			continue
		}
		if j, dup := names[a.Name]; dup {
			c.add(at(m.apps[i].name, m.apps[i].at), "%s: duplicate app name %q (first at line %d)",
				m.apps[i].path, a.Name, at(m.apps[j].name, m.apps[j].at).line)
			continue
		}
		names[a.Name] = i
	}

	defaulted := -1
	for i, a := range s.Apps {
		am := &m.apps[i]
		if am.listenGiven {
			continue
		}
		if defaulted >= 0 {
			c.add(am.at, "%s: listen is required: %s (line %d) already takes the default address %s",
				label(i), label(defaulted), m.apps[defaulted].at.line, DefaultListen)
			continue
		}
		defaulted = i
		a.Listen = []string{DefaultListen}
		am.listens = []pos{{}}
	}

	type hostRef struct {
		app int
		at  pos
	}
	type state struct {
		l          *Listener
		at         pos // where the address first appears
		tlsApp     int // the app whose TLS the listener took; -1: none yet
		h2cApp     int // the first app on the address (whose h2c the listener took)
		defaultApp int
		hosts      map[string]hostRef
	}
	byAddr := map[string]*state{}
	for i, a := range s.Apps {
		am := &m.apps[i]
		for j, addr := range a.Listen {
			ln := am.listenPos(j)
			st := byAddr[addr]
			if st == nil {
				st = &state{l: &Listener{Addr: addr, H2C: a.H2C}, at: ln, tlsApp: -1, h2cApp: i, defaultApp: -1, hosts: map[string]hostRef{}}
				byAddr[addr] = st
				s.Listeners = append(s.Listeners, st.l)
			}
			switch {
			case am.tlsBad:
			case st.tlsApp < 0:
				st.tlsApp = i
				st.l.TLS = a.TLS
			case !sameTLS(st.l.TLS, a.TLS):
				where := ln
				if a.TLS != nil {
					where = at(am.tls, ln)
				}
				c.add(where, "%s: %s on %s, but %s (line %d) has %s; apps sharing a listen address must use the same tls",
					label(i), describeTLS(a.TLS), addr, label(st.tlsApp), m.apps[st.tlsApp].at.line, describeTLS(st.l.TLS))
			}
			if a.H2C != st.l.H2C {
				c.add(at(am.h2c, ln), "%s: h2c %v on %s, but %s (line %d) has h2c %v; apps sharing a listen address must agree on h2c",
					label(i), a.H2C, addr, label(st.h2cApp), m.apps[st.h2cApp].at.line, st.l.H2C)
			}
			st.l.Apps = append(st.l.Apps, a)
			if len(a.Hosts) == 0 && !am.hostsBad {
				if st.defaultApp >= 0 {
					c.add(ln, "%s: both %s (line %d) and %s have no hosts on %s; only one app per listen address can be the default (give the others hosts)",
						label(i), label(st.defaultApp), m.apps[st.defaultApp].at.line, label(i), addr)
				} else {
					st.defaultApp = i
					st.l.Default = a
				}
			}
			for k, h := range a.Hosts {
				hl := ln
				if k < len(am.hosts) {
					hl = at(am.hosts[k], ln)
				}
				if ref, dup := st.hosts[h]; dup {
					c.add(hl, "%s: host %q is already served on %s by %s (line %d)", label(i), h, addr, label(ref.app), ref.at.line)
					continue
				}
				st.hosts[h] = hostRef{i, hl}
			}
		}
	}

	overlapping(s.Listeners, func(x, y *Listener) {
		c.add(byAddr[x.Addr].at, "listen %s overlaps %s (line %d): a wildcard address takes its port on every interface",
			x.Addr, y.Addr, byAddr[y.Addr].at.line)
	})

	if s.Admin.Listen != "" {
		for _, l := range s.Listeners {
			if l.Addr == s.Admin.Listen || overlaps(l.Addr, s.Admin.Listen) {
				st := byAddr[l.Addr]
				c.add(at(m.admin, st.at), "admin.listen %s conflicts with the app listen address %s (line %d)",
					s.Admin.Listen, l.Addr, st.at.line)
			}
		}
	}
}

func sameTLS(a, b *TLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func describeTLS(t *TLS) string {
	if t == nil {
		return "no tls"
	}
	if t.OCSPFile != "" {
		return fmt.Sprintf("tls cert %q, key %q, ocsp %q", t.CertFile, t.KeyFile, t.OCSPFile)
	}
	return fmt.Sprintf("tls cert %q", t.CertFile)
}

// overlapping calls report(x, y) for every listener x and every earlier
// listener y that overlaps it, in the order of x and then of y, and
// returns how many pairs it compared. Listeners are grouped by port, and
// a specific address is compared only with the wildcards of its port
// (at most three: "", "0.0.0.0", "::"), a wildcard with every earlier
// address of its port, so the work is linear in the number of listeners
// plus the overlaps reported (checking every pair was quadratic: issue 18
// saw 4 s for 16,000 apps).
func overlapping(ls []*Listener, report func(x, y *Listener)) (compared int) {
	type port struct{ all, wild []*Listener }
	byPort := map[string]*port{}
	for _, x := range ls {
		h, p, err := net.SplitHostPort(x.Addr)
		if err != nil {
			continue // not a canonical address: overlaps nothing
		}
		pp := byPort[p]
		if pp == nil {
			pp = &port{}
			byPort[p] = pp
		}
		wild := isWildcardHost(h)
		earlier := pp.wild
		if wild {
			earlier = pp.all
		}
		for _, y := range earlier {
			compared++
			if overlaps(x.Addr, y.Addr) {
				report(x, y)
			}
		}
		pp.all = append(pp.all, x)
		if wild {
			pp.wild = append(pp.wild, x)
		}
	}
	return compared
}

// overlaps reports whether two different canonical listen addresses would
// fight over one port: same port, and one of them is a wildcard.
func overlaps(a, b string) bool {
	if a == b {
		return false
	}
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb {
		return false
	}
	return isWildcardHost(ha) || isWildcardHost(hb)
}
