//go:build !linux

package respbuf

func tempFile(dir string) (int, error) { return namedTempFile(dir) }
