package respbuf

import (
	"sync"
)

// BlockSize is the memory a buffer takes, and charges to the budget, at
// a time.
const BlockSize = 16 << 10

type block [BlockSize]byte

var blocks = sync.Pool{New: func() any { return new(block) }}

// Buffer is one response's bytes that its client has not taken yet, in
// the order they came: first in memory blocks (up to Limits.Mem, charged
// to the budget block by block), then, once memory is full, in an
// unlinked temporary file (up to Limits.File, charged as the file grows).
// Bytes go to the file while it holds any, so the order holds; a file
// read to its end is written again from its start (its size, and its
// charge, never pass Limits.File).
//
// A Buffer is not safe for concurrent use: the event loop that owns the
// exchange uses it alone, the goroutine front ends under a lock
// (proxy/respbody.go). Its zero value is ready for Start.
type Buffer struct {
	b   *Budget
	lim Limits // as they were when the response started
	fs  Files

	blk    []*block // blk[0] is read from rd; blk[wi] is written from wr; blocks after wi are reserved, empty
	rd, wr int
	wi     int
	memN   int64 // bytes in memory

	fd       int    // the temporary file (valid when hasFile)
	hasFile  bool   //
	noFile   bool   // a temporary file failed: none for this response
	fr, fw   int64  // the file's read and write offsets
	fsize    int64  // the file's size as charged
	over     []byte // after the file: what Hold kept past the limits (a file write failed)
	counted  bool   // in Budget.responses
	full     bool   // a refusal was counted (once per response)
	totalHit bool   // the last refusal was the process's budget
}

// Start readies r for a response under b's limits, making temporary files
// through fs.
func (r *Buffer) Start(b *Budget, fs Files) {
	r.b, r.fs = b, fs
	r.lim = *b.Limits()
	r.noFile, r.full = false, false
}

// Started tells whether r is readied (Start) and not yet closed.
func (r *Buffer) Started() bool { return r.b != nil }

// Len is the bytes r holds.
func (r *Buffer) Len() int64 { return r.memN + r.fw - r.fr + int64(len(r.over)) }

// InFile tells whether r holds bytes in its temporary file.
func (r *Buffer) InFile() bool { return r.fw > r.fr }

// memFree is what the blocks taken can still hold.
func (r *Buffer) memFree() int {
	if len(r.blk) == 0 {
		return 0
	}
	return BlockSize - r.wr + (len(r.blk)-1-r.wi)*BlockSize
}

// addBlock takes one more block, within Limits.Mem and the budget.
func (r *Buffer) addBlock() bool {
	if int64(len(r.blk)+1)*BlockSize > r.lim.Mem {
		r.totalHit = false
		return false
	}
	if !charge(&r.b.mem, &r.b.memHigh, BlockSize, r.b.lim.Load().MemTotal) {
		r.totalHit = true
		return false
	}
	r.blk = append(r.blk, blocks.Get().(*block))
	return true
}

// fileTake makes the temporary file ready to take up to n more bytes at
// fw, within Limits.File and the budget, and returns how many it can
// (charged as the file grows).
func (r *Buffer) fileTake(n int64) int64 {
	if r.lim.File <= 0 || r.noFile {
		return 0 // (the refusal is memory's)
	}
	n = min(n, r.lim.File-r.fw)
	if n <= 0 {
		r.totalHit = false
		return 0
	}
	if grow := r.fw + n - r.fsize; grow > 0 {
		got := chargeUpTo(&r.b.file, &r.b.fileHigh, grow, r.b.lim.Load().FileTotal)
		r.fsize += got
		if got < grow {
			r.totalHit = true
			if n = r.fsize - r.fw; n <= 0 {
				return 0
			}
		}
	}
	if !r.hasFile {
		fd, err := r.fs.TempFile(r.lim.Dir)
		if err != nil {
			r.b.file.Add(-r.fsize)
			r.fsize = 0
			r.fileFailed()
			return 0
		}
		r.fd, r.hasFile = fd, true
		r.b.spilled.Add(1)
	}
	return n
}

// fileFailed gives up the temporary file for this response (counted):
// nothing more goes to it; what it holds stays readable, and it and its
// charge are given back at Close.
func (r *Buffer) fileFailed() {
	r.b.fileErrs.Add(1)
	r.noFile, r.totalHit = true, false
}

// refused counts, once per response, that r could take no more: the
// response goes on at its client's pace.
func (r *Buffer) refused() {
	if r.full {
		return
	}
	r.full = true
	if r.totalHit {
		r.b.fullTotal.Add(1)
	} else {
		r.b.fullResp.Add(1)
	}
}

// Reserve makes room for n more bytes, so that a Write of up to n bytes
// takes them all: false when the limits cannot give it (counted once per
// response; the caller then waits for its client, as without a buffer).
func (r *Buffer) Reserve(n int) bool {
	if len(r.over) > 0 {
		r.refused()
		return false
	}
	need := int64(n)
	if r.fw == r.fr {
		for need > int64(r.memFree()) {
			if !r.addBlock() {
				break
			}
		}
		need -= int64(r.memFree())
	}
	if need <= 0 || r.fileTake(need) == need {
		return true
	}
	r.refused()
	return false
}

// Write stores as much of p as the limits allow and returns how much.
func (r *Buffer) Write(p []byte) int {
	if len(r.over) > 0 {
		r.refused()
		return 0
	}
	n := 0
	if r.fw == r.fr {
		for n < len(p) {
			if r.memFree() == 0 && !r.addBlock() {
				break
			}
			if r.wr == BlockSize {
				r.wi, r.wr = r.wi+1, 0
			}
			m := copy(r.blk[r.wi][r.wr:], p[n:])
			r.wr += m
			n += m
			r.memN += int64(m)
		}
	}
	if n < len(p) {
		if k := r.fileTake(int64(len(p) - n)); k > 0 {
			m, err := r.fs.Pwrite(r.fd, p[n:n+int(k)], r.fw)
			if m > 0 {
				r.fw += int64(m)
				n += m
			}
			if err != nil {
				r.fileFailed()
			}
		}
		if n < len(p) {
			r.refused()
		}
	}
	r.count()
	return n
}

// Hold stores all of p: what the limits allow as Write does, and the rest
// in memory past them, uncharged, read after everything else. Only a
// temporary file that failed under a Reserve leaves any such rest: a
// caller that reserves before it reads (an event loop: at most one read)
// bounds it, and it is never more than that read.
func (r *Buffer) Hold(p []byte) {
	n := 0
	if len(r.over) == 0 {
		n = r.Write(p)
	}
	if n < len(p) {
		r.over = append(r.over, p[n:]...)
		r.count()
	}
}

// count puts r in the budget's count of responses holding bytes.
func (r *Buffer) count() {
	if !r.counted && r.Len() > 0 {
		r.counted = true
		r.b.responses.Add(1)
	}
}

// Read takes up to len(p) bytes, in order: memory first, then the file.
// The memory of blocks read to their end goes back to the budget at once.
// An error is the file's (the response cannot go on).
func (r *Buffer) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.memN > 0 {
		end := BlockSize
		if r.wi == 0 {
			end = r.wr
		}
		m := copy(p[n:], r.blk[0][r.rd:end])
		r.rd += m
		n += m
		r.memN -= int64(m)
		switch {
		case r.rd < end:
		case r.wi == 0:
			r.rd, r.wr = 0, 0 // the block written is empty: kept
		default:
			r.dropBlock()
		}
	}
	if n < len(p) && r.fw > r.fr {
		m, err := r.fs.Pread(r.fd, p[n:n+int(min(int64(len(p)-n), r.fw-r.fr))], r.fr)
		if m > 0 {
			r.fr += int64(m)
			n += m
		}
		if r.fr == r.fw {
			r.fr, r.fw = 0, 0 // read to its end: written again from its start
		}
		if err != nil {
			return n, err
		}
	}
	if n < len(p) && len(r.over) > 0 && r.memN == 0 && r.fw == r.fr {
		m := copy(p[n:], r.over)
		n += m
		if r.over = r.over[m:]; len(r.over) == 0 {
			r.over = nil
		}
	}
	return n, nil
}

// dropBlock gives the first block back (read to its end).
func (r *Buffer) dropBlock() {
	b := r.blk[0]
	copy(r.blk, r.blk[1:])
	r.blk[len(r.blk)-1] = nil
	r.blk = r.blk[:len(r.blk)-1]
	r.wi--
	r.rd = 0
	blocks.Put(b)
	r.b.mem.Add(-BlockSize)
}

// Close drops what r holds and gives back its memory, its file (closed:
// it was unlinked when made) and their charge. r is then as new.
func (r *Buffer) Close() {
	if r.b == nil {
		return
	}
	for i, b := range r.blk {
		blocks.Put(b)
		r.blk[i] = nil
	}
	if n := int64(len(r.blk)); n > 0 {
		r.b.mem.Add(-n * BlockSize)
	}
	if r.hasFile {
		_ = r.fs.Close(r.fd)
	}
	if r.fsize > 0 {
		r.b.file.Add(-r.fsize)
	}
	if r.counted {
		r.b.responses.Add(-1)
	}
	blk := r.blk[:0]
	*r = Buffer{blk: blk}
}
