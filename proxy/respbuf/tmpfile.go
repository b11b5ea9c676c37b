package respbuf

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// namedTempFile makes a file with a fresh random name in dir and unlinks
// it at once (O_EXCL: never one that was there).
func namedTempFile(dir string) (int, error) {
	var r [12]byte
	var err error
	for i := 0; i < 4; i++ {
		_, _ = rand.Read(r[:])
		name := filepath.Join(dir, ".sentry-response-"+hex.EncodeToString(r[:]))
		var fd int
		fd, err = unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return -1, err
		}
		if err = unix.Unlink(name); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	return -1, err
}
