package respbuf

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// memFiles is a Files in memory that counts what is open and can be told
// to fail.
type memFiles struct {
	mu       sync.Mutex
	files    map[int][]byte
	next     int
	made     int
	failMake bool
	failAt   int64 // Pwrite fails once the file would pass this size (0: never)
}

func newMemFiles() *memFiles { return &memFiles{files: map[int][]byte{}, next: 100} }

func (m *memFiles) TempFile(string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failMake {
		return -1, errors.New("no space")
	}
	m.next++
	m.made++
	m.files[m.next] = nil
	return m.next, nil
}

func (m *memFiles) Pwrite(fd int, p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[fd]
	if !ok {
		return 0, errors.New("bad fd")
	}
	n := len(p)
	var err error
	if m.failAt > 0 && off+int64(n) > m.failAt {
		n, err = int(max(m.failAt-off, 0)), errors.New("ENOSPC")
	}
	for int64(len(f)) < off+int64(n) {
		f = append(f, 0)
	}
	copy(f[off:], p[:n])
	m.files[fd] = f
	return n, err
}

func (m *memFiles) Pread(fd int, p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[fd]
	if !ok {
		return 0, errors.New("bad fd")
	}
	return copy(p, f[off:]), nil
}

func (m *memFiles) Close(fd int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[fd]; !ok {
		return errors.New("closed twice")
	}
	delete(m.files, fd)
	return nil
}

func (m *memFiles) open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.files)
}

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b[:n]
}

// drain reads r to its end in pieces of k bytes.
func drain(t *testing.T, r *Buffer, k int) []byte {
	t.Helper()
	var out []byte
	p := make([]byte, k)
	for r.Len() > 0 {
		n, err := r.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("Read gave nothing with %d bytes held", r.Len())
		}
		out = append(out, p[:n]...)
	}
	return out
}

// TestBufferOrder: bytes come out in the order they went in, through
// memory and the file, written and read in pieces of every size; the
// memory charge follows the blocks held, and Close gives everything back.
func TestBufferOrder(t *testing.T) {
	for _, c := range []struct {
		name      string
		mem, file int64
		in        int
	}{
		{"memory only", 8 * BlockSize, 0, 5*BlockSize + 17},
		{"spills", 2 * BlockSize, 1 << 20, 7*BlockSize + 5},
		{"file only (one block)", BlockSize, 1 << 20, 9 * BlockSize},
	} {
		for _, w := range []int{1, 100, BlockSize - 1, BlockSize, 3*BlockSize + 3} {
			for _, rd := range []int{7, BlockSize, 2*BlockSize + 1} {
				if w == 1 && rd != 7 {
					continue // (slow, and says nothing more)
				}
				b := NewBudget(Limits{Mem: c.mem, File: c.file})
				fs := newMemFiles()
				var r Buffer
				r.Start(b, fs)
				in := pattern(c.in, uint64(w*rd))
				var out []byte
				for off := 0; off < len(in); {
					end := min(off+w, len(in))
					if !r.Reserve(end - off) {
						t.Fatalf("%s w=%d: no room for %d with %d held", c.name, w, end-off, r.Len())
					}
					if n := r.Write(in[off:end]); n != end-off {
						t.Fatalf("%s: Write took %d of %d after Reserve", c.name, n, end-off)
					}
					if got := b.Stats().Mem; got > c.mem {
						t.Fatalf("%s: %d bytes of memory charged, limit %d", c.name, got, c.mem)
					}
					off = end
					if off%(5*w) == 0 && w > 1 { // read some as it goes
						p := make([]byte, rd)
						n, err := r.Read(p)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, p[:n]...)
					}
				}
				out = append(out, drain(t, &r, rd)...)
				if !bytes.Equal(out, in) {
					t.Fatalf("%s w=%d rd=%d: bytes out of order (%d of %d)", c.name, w, rd, len(out), len(in))
				}
				st := b.Stats()
				if st.Mem > BlockSize || st.Responses != 1 {
					t.Errorf("%s: read out, still charged %d (more than the block kept), responses %d", c.name, st.Mem, st.Responses)
				}
				if st.Spilled > 1 || st.FileHigh > c.file {
					t.Errorf("%s: spilled %d, file high %d", c.name, st.Spilled, st.FileHigh)
				}
				r.Close()
				if st := b.Stats(); st.Mem != 0 || st.File != 0 || st.Responses != 0 || fs.open() != 0 {
					t.Errorf("%s: after Close: %+v, %d files open", c.name, st, fs.open())
				}
			}
		}
	}
}

// TestBufferFileReuse: a file read to its end is written again from its
// start, so a response that streams far more than Limits.File through a
// client that keeps up never passes it.
func TestBufferFileReuse(t *testing.T) {
	b := NewBudget(Limits{Mem: BlockSize, File: 4 * BlockSize})
	fs := newMemFiles()
	var r Buffer
	r.Start(b, fs)
	var in, out []byte
	for i := 0; i < 50; i++ {
		p := pattern(3*BlockSize, uint64(i))
		if !r.Reserve(len(p)) || r.Write(p) != len(p) {
			t.Fatalf("round %d: no room with %d held", i, r.Len())
		}
		in = append(in, p...)
		out = append(out, drain(t, &r, 5000)...)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("bytes out of order")
	}
	if st := b.Stats(); st.FileHigh > 4*BlockSize || st.Spilled != 1 || st.FullResponse != 0 {
		t.Errorf("%+v: the file grew past its limit, or was made more than once", st)
	}
	r.Close()
}

// TestBufferLimits: at its own limits a response is refused (counted once
// as "response"); at the process's budget, another response is refused
// and counted as "total"; nothing is ever charged past a limit.
func TestBufferLimits(t *testing.T) {
	b := NewBudget(Limits{Mem: 4 * BlockSize, MemTotal: 6 * BlockSize, File: 2 * BlockSize, FileTotal: 3 * BlockSize})
	fs := newMemFiles()
	var r1, r2 Buffer
	r1.Start(b, fs)
	r2.Start(b, fs)
	big := pattern(10*BlockSize, 1)
	if n := r1.Write(big); n != 6*BlockSize {
		t.Fatalf("r1 took %d, want its limits (4 blocks of memory, 2 of file)", n)
	}
	if r1.Reserve(1) || r1.Write(big[:10]) != 0 {
		t.Fatal("r1 took more than its limits")
	}
	if n := r2.Write(big); n != 3*BlockSize {
		t.Fatalf("r2 took %d, want the budget's rest (2 blocks of memory, 1 of file)", n)
	}
	st := b.Stats()
	if st.FullResponse != 1 || st.FullTotal != 1 {
		t.Errorf("refusals: response %d, total %d; want 1 and 1", st.FullResponse, st.FullTotal)
	}
	if st.MemHigh > 6*BlockSize || st.FileHigh > 3*BlockSize {
		t.Errorf("high-water %d/%d past the budget", st.MemHigh, st.FileHigh)
	}
	// What r1 frees, r2 may take.
	drain(t, &r1, 1000)
	r1.Close()
	if !r2.Reserve(BlockSize) {
		t.Error("r2 found no room after r1 gave its memory back")
	}
	r2.Close()
	if st := b.Stats(); st.Mem != 0 || st.File != 0 || fs.open() != 0 {
		t.Errorf("after Close: %+v, %d files open", st, fs.open())
	}
}

// TestBufferFileFailures: a temporary file that cannot be made, or a
// write that fails (a full disk), leaves the response in memory: counted,
// what was written stays readable, no descriptor leaks.
func TestBufferFileFailures(t *testing.T) {
	b := NewBudget(Limits{Mem: BlockSize, File: 1 << 20})
	fs := newMemFiles()
	fs.failMake = true
	var r Buffer
	r.Start(b, fs)
	in := pattern(3*BlockSize, 3)
	if n := r.Write(in); n != BlockSize {
		t.Fatalf("took %d with no file, want one block", n)
	}
	if r.Reserve(1) {
		t.Error("room after the file failed")
	}
	if st := b.Stats(); st.FileErrors != 1 || st.Spilled != 0 {
		t.Errorf("%+v", st)
	}
	r.Close()

	fs = newMemFiles()
	fs.failAt = BlockSize + 100
	r.Start(b, fs)
	n := r.Write(in)
	if n != 2*BlockSize+100 {
		t.Fatalf("took %d, want memory's block and the file's %d bytes", n, BlockSize+100)
	}
	if out := drain(t, &r, 4096); !bytes.Equal(out, in[:n]) {
		t.Fatal("what was written is not what is read")
	}
	r.Close()
	if st := b.Stats(); st.Mem != 0 || st.File != 0 || fs.open() != 0 || st.FileErrors != 2 {
		t.Errorf("%+v, %d open", st, fs.open())
	}
}

// TestBudgetConcurrent: many responses charging one budget from many
// goroutines never pass it (the high-water mark), and give it all back.
func TestBudgetConcurrent(t *testing.T) {
	const total = 20 * BlockSize
	b := NewBudget(Limits{Mem: 8 * BlockSize, MemTotal: total})
	in := pattern(5*BlockSize, 1)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Buffer
			for i := 0; i < 100; i++ {
				r.Start(b, newMemFiles())
				r.Write(in)
				p := make([]byte, 3*BlockSize)
				_, _ = r.Read(p)
				r.Close()
			}
		}()
	}
	wg.Wait()
	if st := b.Stats(); st.MemHigh > total || st.Mem != 0 || st.Responses != 0 {
		t.Errorf("%+v: high-water past %d, or not given back", st, total)
	}
}

// TestOSFiles: a real temporary file has no name in its directory, reads
// back what was written, and its descriptor closes.
func TestOSFiles(t *testing.T) {
	dir := t.TempDir()
	fs := OSFiles{}
	fd, err := fs.TempFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := pattern(100000, 9)
	if n, err := fs.Pwrite(fd, in, 5); n != len(in) || err != nil {
		t.Fatal(n, err)
	}
	out := make([]byte, len(in))
	if n, err := fs.Pread(fd, out, 5); n != len(in) || err != nil || !bytes.Equal(in, out) {
		t.Fatal(n, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the temporary file has a name: %v", ents)
	}
	if err := fs.Close(fd); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(fd); err == nil {
		t.Error("closed twice")
	}
	if fd, err := namedTempFile(dir); err != nil {
		t.Fatal(err)
	} else {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("the fallback's file has a name: %v", ents)
		}
		fs.Close(fd)
	}
	if err := CheckDir(dir + "/missing"); err == nil {
		t.Error("a missing directory passed CheckDir")
	}
}

func TestStreams(t *testing.T) {
	for _, c := range []struct {
		ct, accel string
		want      bool
	}{
		{"text/event-stream", "", true},
		{"Text/Event-Stream; charset=utf-8", "", true},
		{" text/event-stream ", "", true},
		{"text/event-streams", "", false},
		{"application/grpc", "", true},
		{"application/grpc+proto", "", true},
		{"application/grpc-web+proto", "", true},
		{"APPLICATION/GRPC", "", true},
		{"application/json", "", false},
		{"text/html", "no", true},
		{"text/html", "No", true},
		{"text/html", "yes", false},
		{"", "", false},
	} {
		if got := Streams([]byte(c.ct), []byte(c.accel)); got != c.want {
			t.Errorf("Streams(%q, %q) = %v", c.ct, c.accel, got)
		}
	}
}

// TestBufferHold: bytes a failing file cannot take after a Reserve are
// kept, in order, past the limits, and nothing more is taken until they
// are read.
func TestBufferHold(t *testing.T) {
	b := NewBudget(Limits{Mem: BlockSize, File: 1 << 20})
	fs := newMemFiles()
	fs.failAt = 100
	var r Buffer
	r.Start(b, fs)
	in := pattern(3*BlockSize, 4)
	if !r.Reserve(2 * BlockSize) {
		t.Fatal("no room")
	}
	r.Hold(in[:2*BlockSize]) // a block in memory, 100 bytes in the file, the rest past the limits
	if r.Len() != 2*BlockSize {
		t.Fatalf("holds %d", r.Len())
	}
	if r.Reserve(1) || r.Write(in[2*BlockSize:]) != 0 {
		t.Fatal("took more behind bytes held past the limits")
	}
	if out := drain(t, &r, 3000); !bytes.Equal(out, in[:2*BlockSize]) {
		t.Fatal("out of order")
	}
	r.Close()
	if st := b.Stats(); st.Mem != 0 || st.File != 0 || st.MemHigh > BlockSize || fs.open() != 0 {
		t.Errorf("%+v", st)
	}
}
