package respbuf

import "golang.org/x/sys/unix"

func tempFile(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	switch err {
	case nil:
		return fd, nil
	case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
		return namedTempFile(dir) // a file system without O_TMPFILE
	}
	return -1, err
}
