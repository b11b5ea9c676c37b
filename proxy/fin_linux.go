package proxy

import (
	"sync"
	"sync/atomic"
	"syscall"
)

// A client's FIN while its request is relayed, on fasthttp's HTTP/1.1
// connections. The loops read the client while they relay and take an
// end of stream then as the client leaving: the exchange ends as
// client_gone (499) and the connection closes unanswered, as nginx does
// by default (proxy_ignore_client_abort off). fasthttp's goroutine does
// not read its connection while the handler runs, so a second epoll
// instance watches for it: a connection is added (EPOLLRDHUP, one shot)
// at its first relayed request and removed at its first FIN or hang-up
// event (or when it closes, if none came): at most one add and one
// delete per connection, none per request. What the event leaves is
// fin.seen, which stays set for the connection's later requests. A
// request is relayed from its dispatch to the last byte read from the
// backend (bodyEnd, when the body streams). A FIN seen then shuts the
// socket down at once (the client reads the end of the stream), and the
// request ends as client_gone: when its relay returns, or at its body's
// end, which the failed write brings. A request that starts with
// fin.seen already set is not sent. On a connection's first relayed
// request the watch is only added in relayStart and its events come
// asynchronously, so a FIN that came before is seen after the request
// was sent, and ends it as one during the relay. The watch takes any FIN
// as the client leaving, with pipelined requests unread or not (unlike
// connAlive after an admission wait, alive_linux.go). HostClient does
// not say which backend connection it took, so before the response
// head the backend's exchange is not cut: its head is read and dropped.
type finWatcher struct {
	epfd int
	mu   struct {
		sync.Mutex
		gen   int32
		conns map[int32]*drainConn // by socket; the entry's gen is the conn's fin.gen
	}
}

var (
	finOnce sync.Once
	finW    atomic.Pointer[finWatcher] // nil if epoll is unavailable
)

func finWatch() *finWatcher {
	finOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		w := &finWatcher{epfd: fd}
		w.mu.conns = map[int32]*drainConn{}
		go w.loop() // process lifetime: one goroutine, blocked in epoll_wait
		finW.Store(w)
	})
	return finW.Load()
}

func (w *finWatcher) loop() {
	var evs [64]syscall.EpollEvent
	for {
		n, err := syscall.EpollWait(w.epfd, evs[:], -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		w.mu.Lock()
		for _, ev := range evs[:n] {
			c := w.mu.conns[ev.Fd]
			if c == nil || c.fin.gen != ev.Pad {
				continue // a registration ended since (the gen tells a reused fd)
			}
			delete(w.mu.conns, ev.Fd)
			c.fin.gen = 0
			_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
			c.fin.seen.Store(true)
			if c.fin.relaying.Load() {
				// Under w.mu: the conn cannot close its socket meanwhile
				// (unwatchFIN takes w.mu first), so fd is still its own.
				_ = syscall.Shutdown(int(ev.Fd), syscall.SHUT_RDWR)
			}
		}
		w.mu.Unlock()
	}
}

// watchFIN adds c's socket to the watch, once per connection; it is not
// watched if its socket cannot be reached.
func (c *drainConn) watchFIN() {
	c.fin.tried.Store(true)
	w := finWatch()
	if w == nil {
		return
	}
	fd, ok := sockFD(c)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.fin.over {
		return
	}
	w.mu.gen++
	if w.mu.gen <= 0 {
		w.mu.gen = 1
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | epollOneShot, Fd: int32(fd), Pad: w.mu.gen}
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return
	}
	c.fin.fd, c.fin.gen = int32(fd), w.mu.gen
	w.mu.conns[int32(fd)] = c
}

// unwatchFIN ends c's watch, before its socket is closed.
func (c *drainConn) unwatchFIN() {
	if !c.fin.tried.Load() {
		return
	}
	w := finW.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	c.fin.over = true
	if c.fin.gen != 0 && w.mu.conns[c.fin.fd] == c {
		delete(w.mu.conns, c.fin.fd)
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(c.fin.fd), nil)
	}
	c.fin.gen = 0
	w.mu.Unlock()
}
