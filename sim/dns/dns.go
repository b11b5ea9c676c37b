// Package dns is a tiny authoritative DNS server for tests and
// experiments: it answers A and AAAA questions for the names it is given,
// from memory, with TTL 0, on UDP and TCP at one loopback address. It
// stands in for a Kubernetes headless Service, whose records follow the
// ready pods, so that a sentry following a DNS name (backends.dns, with
// backends.dns.server pointing here) sees servers come and go.
//
// It is not a resolver: it does no recursion, and a name it does not hold
// gets NXDOMAIN (a held name with no address of the asked family gets an
// empty answer, NOERROR). Messages are parsed and built with
// golang.org/x/net/dns/dnsmessage, the package Go's own resolver uses.
//
// Usage:
//
//	srv, err := dns.Start("127.0.0.1:0")
//	defer srv.Close()
//	srv.Set("farm.test", netip.MustParseAddr("127.0.0.11"), netip.MustParseAddr("127.0.0.12"))
//	// policy: backends: {dns: {name: farm.test, port: P, server: srv.Addr()}}
//
// Concurrency: Set and Lookup may be called from any goroutine; the
// records sit behind one mutex, never held while a socket is used. Close
// stops both listeners and waits for every goroutine the server started.
package dns

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers A and AAAA questions from its records.
type Server struct {
	udp *net.UDPConn
	tcp *net.TCPListener
	wg  sync.WaitGroup

	mu      sync.Mutex
	records map[string][]netip.Addr // canonical name (lower case, trailing dot) → addresses

	queries atomic.Int64
	closed  atomic.Bool
}

// Start listens on addr (an IP:port; port 0 picks one) over UDP, and over
// TCP on the same port, and serves until Close. With port 0 a port free
// for UDP but taken for TCP is given up and another tried (a few times).
func Start(addr string) (*Server, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		udp, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, err
		}
		la := udp.LocalAddr().(*net.UDPAddr)
		tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: la.IP, Port: la.Port})
		if err != nil {
			udp.Close()
			if ua.Port == 0 && try < 10 {
				continue
			}
			return nil, err
		}
		s := &Server{udp: udp, tcp: tcp, records: map[string][]netip.Addr{}}
		s.wg.Add(2)
		go s.serveUDP()
		go s.serveTCP()
		return s, nil
	}
}

// Addr is the server's IP:port (the same for UDP and TCP).
func (s *Server) Addr() string { return s.udp.LocalAddr().String() }

// Queries is the number of questions answered so far.
func (s *Server) Queries() int64 { return s.queries.Load() }

// Set replaces name's addresses. With none the name still exists (empty
// answers); Delete removes it.
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	s.records[canonical(name)] = append([]netip.Addr{}, addrs...)
	s.mu.Unlock()
}

// Delete removes name: it then gets NXDOMAIN.
func (s *Server) Delete(name string) {
	s.mu.Lock()
	delete(s.records, canonical(name))
	s.mu.Unlock()
}

// Lookup returns name's addresses and whether the name exists.
func (s *Server) Lookup(name string) ([]netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.records[canonical(name)]
	return append([]netip.Addr(nil), a...), ok
}

// Close stops serving and waits for the server's goroutines.
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := errors.Join(s.udp.Close(), s.tcp.Close())
	s.wg.Wait()
	return err
}

func canonical(name string) string {
	n := strings.ToLower(name)
	if !strings.HasSuffix(n, ".") {
		n += "."
	}
	return n
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if s.closed.Load() {
				return
			}
			continue
		}
		out, ok := s.answer(buf[:n], 512)
		if ok {
			s.udp.WriteToUDPAddrPort(out, from) //nolint:errcheck // a lost answer is retried by the client
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if s.closed.Load() {
				return
			}
			continue
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			s.serveConn(c)
		}()
	}
}

// serveConn answers length-prefixed messages on one TCP connection until
// the client closes it or goes quiet for 5 s.
func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	for !s.closed.Load() {
		c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		out, ok := s.answer(msg, 65535)
		if !ok {
			return
		}
		out = append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// answer builds the response to one query message; ok is false for a
// message that is not a parsable query (it is ignored, as a server would).
// An answer larger than limit is cut to the header and question with the
// TC bit set, so the client asks again over TCP.
func (s *Server) answer(query []byte, limit int) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	s.queries.Add(1)
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	addrs, found := s.Lookup(q.Name.String())
	switch {
	case h.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case q.Class != dnsmessage.ClassINET:
		rh.RCode = dnsmessage.RCodeRefused
	case !found:
		rh.RCode = dnsmessage.RCodeNameError
	}
	build := func(withAnswers bool) ([]byte, error) {
		b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
		b.EnableCompression()
		if err := b.StartQuestions(); err != nil {
			return nil, err
		}
		if err := b.Question(q); err != nil {
			return nil, err
		}
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		if withAnswers && rh.RCode == dnsmessage.RCodeSuccess {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0}
			for _, a := range addrs {
				var err error
				switch {
				case q.Type == dnsmessage.TypeA && a.Is4():
					err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
				case q.Type == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
					err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
				}
				if err != nil {
					return nil, err
				}
			}
		}
		return b.Finish()
	}
	out, err := build(true)
	if err == nil && len(out) > limit {
		rh.Truncated = true
		out, err = build(false)
	}
	return out, err == nil
}
