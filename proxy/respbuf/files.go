package respbuf

import (
	"os"

	"golang.org/x/sys/unix"
)

// Files is what a Buffer asks of the file system: a temporary file with no
// name (unlinked when made, so that no path is left behind whatever
// happens to the process, and its space is freed by the last close),
// positioned reads and writes, and the close. An event loop passes its
// scripted system calls (package proxy/evloop's tests); everyone else
// OSFiles.
type Files interface {
	TempFile(dir string) (fd int, err error)
	Pwrite(fd int, p []byte, off int64) (int, error)
	Pread(fd int, p []byte, off int64) (int, error)
	Close(fd int) error
}

// OSFiles is the real Files. Its reads and writes block the calling
// goroutine for as long as the disk takes (an event loop too, as nginx's
// worker does with its temporary files without aio); they go through the
// scheduler (unix.Pread, not a raw call), so a slow disk costs a thread,
// not a P.
type OSFiles struct{}

var _ Files = OSFiles{}

// TempFile makes an unnamed file in dir ("" is os.TempDir()), readable and
// writable by this process only: O_TMPFILE where the file system has it,
// else a file made with a fresh name and unlinked at once.
func (OSFiles) TempFile(dir string) (int, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	return tempFile(dir)
}

func (OSFiles) Pwrite(fd int, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pwrite(fd, p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if m > 0 {
			n += m
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, unix.EIO
		}
	}
	return n, nil
}

func (OSFiles) Pread(fd int, p []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		if err == nil && n == 0 && len(p) > 0 {
			err = unix.EIO // shorter than what was written to it
		}
		return n, err
	}
}

func (OSFiles) Close(fd int) error { return unix.Close(fd) }

// CheckDir makes and drops one temporary file in dir: a policy whose
// directory cannot hold them is refused when it is applied.
func CheckDir(dir string) error {
	fd, err := OSFiles{}.TempFile(dir)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}
