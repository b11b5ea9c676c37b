//go:build linux

package evloop

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sentry-proxy/sentry/proxy/respbuf"
)

// Sys is everything a loop asks of the kernel once it runs, so that
// tests can script it: the loop's sockets, its epoll set and its eventfd.
// Production uses RawSys. Arguments are plain values (an epoll registration is its
// events and tag, not a *unix.EpollEvent), so that calling through the
// interface does not make the loop allocate.
type Sys interface {
	Read(fd int, p []byte) (int, error)
	Write(fd int, p []byte) (int, error)
	Close(fd int) error
	// ShutdownWrite sends FIN (a lingering close).
	ShutdownWrite(fd int) error
	// Accept takes a connection from the listener, non-blocking, with
	// TCP_NODELAY set.
	Accept(lfd int) (fd int, sa unix.Sockaddr, err error)
	// Dial opens a non-blocking socket to sa with TCP_NODELAY set and
	// starts connecting: inProgress says the connect has not completed
	// (EPOLLOUT tells when it has, ConnectError how).
	Dial(sa unix.Sockaddr) (fd int, inProgress bool, err error)
	// ConnectError is the result of a connect that was in progress
	// (SO_ERROR): 0 when it succeeded.
	ConnectError(fd int) (int, error)
	// EpollCtl adds (EPOLL_CTL_ADD), changes (MOD) or removes (DEL) fd in
	// the loop's epoll set ep; tag is what the events report as their fd.
	EpollCtl(ep, op, fd int, events uint32, tag int32) error
	// EpollWait returns ready events: at once if any, else waits at most
	// msec.
	EpollWait(ep int, evs []unix.EpollEvent, msec int) (int, error)
	// TempFile, Pwrite and Pread are a response buffer's temporary file
	// (respbuf.Files, whose Close is the one above).
	TempFile(dir string) (fd int, err error)
	Pwrite(fd int, p []byte, off int64) (int, error)
	Pread(fd int, p []byte, off int64) (int, error)
}

// Clock is the loop's clock: the time it stamps each round with;
// deadlines and a response's measured time are read from it. Tests use a
// manual one.
type Clock func() time.Time

// RawSys is the real Sys.
//
// The loops' socket calls never block (every socket is non-blocking), so
// they are made as raw system calls: the Go scheduler is not told, no P is
// handed off, and sysmon is not woken to retake one. epoll_wait is polled
// raw first and only blocks through the scheduler when nothing is ready.
type RawSys struct{}

var _ Sys = RawSys{}

func (RawSys) Read(fd int, p []byte) (int, error)  { return rawRead(fd, p) }
func (RawSys) Write(fd int, p []byte) (int, error) { return rawWrite(fd, p) }
func (RawSys) Close(fd int) error                  { return unix.Close(fd) }
func (RawSys) ShutdownWrite(fd int) error          { return unix.Shutdown(fd, unix.SHUT_WR) }

func (RawSys) Accept(lfd int) (int, unix.Sockaddr, error) {
	fd, sa, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err == nil {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	return fd, sa, err
}

func (RawSys) Dial(addr unix.Sockaddr) (int, bool, error) {
	// connect(2) through x/sys writes into the Sockaddr it is given, so
	// each call gets its own copy (loops share the upstream's).
	fam := unix.AF_INET
	switch sa := addr.(type) {
	case *unix.SockaddrInet4:
		c := *sa
		addr = &c
	case *unix.SockaddrInet6:
		fam = unix.AF_INET6
		c := *sa
		addr = &c
	}
	fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, false, err
	}
	inProgress := false
	if err := unix.Connect(fd, addr); err != nil {
		if err != unix.EINPROGRESS && err != unix.EINTR {
			unix.Close(fd)
			return -1, false, err
		}
		inProgress = true
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return fd, inProgress, nil
}

func (RawSys) TempFile(dir string) (int, error) { return respbuf.OSFiles{}.TempFile(dir) }
func (RawSys) Pwrite(fd int, p []byte, off int64) (int, error) {
	return respbuf.OSFiles{}.Pwrite(fd, p, off)
}
func (RawSys) Pread(fd int, p []byte, off int64) (int, error) {
	return respbuf.OSFiles{}.Pread(fd, p, off)
}

func (RawSys) ConnectError(fd int) (int, error) {
	return unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
}

func (RawSys) EpollCtl(ep, op, fd int, events uint32, tag int32) error {
	if op == unix.EPOLL_CTL_DEL {
		return unix.EpollCtl(ep, op, fd, nil)
	}
	return unix.EpollCtl(ep, op, fd, &unix.EpollEvent{Events: events, Fd: tag})
}

// EpollWait returns ready events: at once if there are any (a raw call,
// no scheduler work), else from a blocking epoll_wait of at most msec.
//
// Blocking in epoll_wait keeps the loop on its thread, which the kernel
// wakes directly when a socket is ready, as an nginx worker is. We also
// tried parking in Go's netpoller instead (the epoll descriptor registered
// there): at light load it was better (wrk -c4: 16-18k against 13-13.5k
// req/s, p50 200 against 260 us), since no P waits in a syscall for sysmon
// to retake; at 64 connections on 2 cores it was 10-20% slower on the
// reject path (72-84k against 80-102k req/s, same runs), each park and
// wake costing the scheduler's thread hand-offs. Overload is what sentry
// is for, so the loop blocks.
func (RawSys) EpollWait(ep int, evs []unix.EpollEvent, msec int) (int, error) {
	if n, err := pollNow(ep, evs); n > 0 || err != nil && err != unix.EINTR {
		return n, err
	}
	return unix.EpollWait(ep, evs, msec)
}

func rawRead(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// pollNow is a non-blocking epoll_wait.
func pollNow(ep int, evs []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
