package learned

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sentry-proxy/sentry/control"
	"github.com/sentry-proxy/sentry/lb"
)

// Format and Version identify a document.
const (
	Format  = "sentry-learned-state"
	Version = 1
)

// MaxSize bounds a document read from a file or the handover socket.
const MaxSize = 256 << 20

// Document is what sentry has learned, as one JSON object.
type Document struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Taken is when it was taken; By is the process that took it.
	Taken time.Time `json:"taken"`
	By    Origin    `json:"by"`
	Apps  []App     `json:"apps"`
}

// Origin names the process that took a document.
type Origin struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// App is one app's learned state.
type App struct {
	Name      string           `json:"name"`
	Admission control.AppState `json:"admission"`
	Backends  []lb.Health      `json:"backends,omitempty"`
}

// New returns an empty document taken at now by origin.
func New(now time.Time, by Origin) *Document {
	return &Document{Format: Format, Version: Version, Taken: now.UTC(), By: by}
}

// Validate checks what Decode checks: format, version, app names.
func (d *Document) Validate() error {
	if d.Format != Format {
		return fmt.Errorf("format %q, want %q", d.Format, Format)
	}
	if d.Version != Version {
		return fmt.Errorf("version %d; this sentry reads version %d", d.Version, Version)
	}
	seen := map[string]bool{}
	for _, a := range d.Apps {
		if a.Name == "" {
			return errors.New("an app without a name")
		}
		if seen[a.Name] {
			return fmt.Errorf("app %q twice", a.Name)
		}
		seen[a.Name] = true
	}
	return nil
}

// Encode writes d as one line of JSON.
func Encode(w io.Writer, d *Document) error {
	return json.NewEncoder(w).Encode(d)
}

// Decode reads one document (at most MaxSize bytes) and validates it:
// unknown fields are errors, as in a policy.
func Decode(data []byte) (*Document, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("learned state: %d bytes, more than %d", len(data), MaxSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("learned state: %w", err)
	}
	if dec.More() {
		return nil, errors.New("learned state: data after the document")
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("learned state: %w", err)
	}
	return &d, nil
}

// SaveEvery is how often `sentry run -state-file` writes the state file
// while it runs (and once more at a stop).
const SaveEvery = time.Minute

// ReadFile reads and decodes a state file. A missing file gives an error
// for which errors.Is(err, os.ErrNotExist) holds.
func ReadFile(path string) (*Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	d, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// WriteFile writes d to path atomically: a temporary file in the same
// directory, synced, then renamed over path, so a reader (or a crash)
// sees the old file or the new one, never a part. Mode 0600: the keys
// are request paths.
func WriteFile(path string, d *Document) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	w := bufio.NewWriterSize(f, 256<<10)
	if err := Encode(w, d); err != nil {
		return fail(err)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if dh, err := os.Open(dir); err == nil {
		_ = dh.Sync() // the rename itself, on a crash
		dh.Close()
	}
	return nil
}
