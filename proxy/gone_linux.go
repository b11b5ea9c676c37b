package proxy

import (
	"crypto/tls"
	"net"
	"sync"
	"syscall"
)

// goneWatcher tells a request waiting for admission that its client hung
// up, so it leaves its batch queue (docs/algorithms.md §2, Bounds) instead of
// being admitted for nobody. One epoll instance serves the process: a
// waiting request's socket is added with EPOLLRDHUP|EPOLLONESHOT (the peer
// closed or shut down its write side) and removed when the decision comes:
// two epoll_ctl calls per waiting request, no polling. The sockets stay in
// Go's own netpoller too; an fd may belong to several epoll sets.
type goneWatcher struct {
	epfd int
	mu   struct {
		sync.Mutex
		waiting map[int32]chan struct{}
	}
}

var (
	watcherOnce sync.Once
	watcher     *goneWatcher // nil if epoll is unavailable
)

func goneWatch() *goneWatcher {
	watcherOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		w := &goneWatcher{epfd: fd}
		w.mu.waiting = map[int32]chan struct{}{}
		go w.loop() // process lifetime: one goroutine, blocked in epoll_wait
		watcher = w
	})
	return watcher
}

func (w *goneWatcher) loop() {
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
			if ch, ok := w.mu.waiting[ev.Fd]; ok {
				delete(w.mu.waiting, ev.Fd)
				close(ch)
			}
		}
		w.mu.Unlock()
	}
}

// sockFD returns the socket descriptor of a client connection.
func sockFD(c net.Conn) (int, bool) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	_ = raw.Control(func(f uintptr) { fd = int(f) })
	return fd, fd >= 0
}

// watch returns a channel closed when the peer of c hangs up, and a stop
// function that must be called before the request goes on (it unregisters
// the socket). ok is false when c cannot be watched.
func watchGone(c net.Conn) (gone <-chan struct{}, stop func(), ok bool) {
	w := goneWatch()
	if w == nil || c == nil {
		return nil, nil, false
	}
	fd, ok := sockFD(c)
	if !ok {
		return nil, nil, false
	}
	ch := make(chan struct{})
	w.mu.Lock()
	w.mu.waiting[int32(fd)] = ch
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | epollOneShot, Fd: int32(fd)}
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		w.mu.Lock()
		delete(w.mu.waiting, int32(fd))
		w.mu.Unlock()
		return nil, nil, false
	}
	return ch, func() {
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
		w.mu.Lock()
		if w.mu.waiting[int32(fd)] == ch {
			delete(w.mu.waiting, int32(fd))
		}
		w.mu.Unlock()
	}, true
}

const epollOneShot = 1 << 30 // EPOLLONESHOT
