package respbuf

import (
	"sync/atomic"
)

// Limits are the response-buffering settings (policy server.response_*).
type Limits struct {
	// Mem is what one response may hold in memory
	// (server.response_buffer); 0 turns response buffering off.
	Mem int64
	// MemTotal caps the memory of every response's buffer together
	// (server.response_buffer_total); 0: no cap.
	MemTotal int64
	// File is what one response may hold in its temporary file
	// (server.response_temp_file, nginx's proxy_max_temp_file_size);
	// 0: no temporary files.
	File int64
	// FileTotal caps the size of every temporary file together
	// (server.response_temp_file_total); 0: no cap.
	FileTotal int64
	// Dir is where temporary files are made (server.response_temp_dir);
	// "" is the system's (os.TempDir).
	Dir string
}

// Budget is the process-wide account of response buffers: one for every
// engine, shared by the event loops and the goroutine front ends. Its
// counters are atomics; the limits are a snapshot swapped by a reload
// (SetLimits) and read once per response (a Buffer keeps the ones it
// started with).
type Budget struct {
	lim atomic.Pointer[Limits]

	mem, file         atomic.Int64 // charged now, bytes
	memHigh, fileHigh atomic.Int64 // the most ever charged at once
	responses         atomic.Int64 // responses holding bytes now

	spilled   atomic.Uint64 // responses that went to a temporary file
	fullResp  atomic.Uint64 // responses that met their own limits
	fullTotal atomic.Uint64 // responses that met the process's budget
	fileErrs  atomic.Uint64 // temporary files that could not be made or written
}

// NewBudget returns a budget with limits l.
func NewBudget(l Limits) *Budget {
	b := &Budget{}
	b.SetLimits(l)
	return b
}

// SetLimits replaces the limits; responses already buffering keep theirs
// (a lowered total applies to every charge from now on).
func (b *Budget) SetLimits(l Limits) { b.lim.Store(&l) }

// Limits returns the limits in force.
func (b *Budget) Limits() *Limits { return b.lim.Load() }

// On tells whether responses are buffered at all (server.response_buffer
// above 0). A nil budget is off.
func (b *Budget) On() bool {
	if b == nil {
		return false
	}
	l := b.lim.Load()
	return l != nil && l.Mem > 0
}

// charge takes n bytes from the account c (mem or file) under total;
// false, nothing taken, if that would pass it (0: no cap).
func charge(c, high *atomic.Int64, n, total int64) bool {
	for {
		u := c.Load()
		if total > 0 && u+n > total {
			return false
		}
		if c.CompareAndSwap(u, u+n) {
			for h := high.Load(); u+n > h && !high.CompareAndSwap(h, u+n); h = high.Load() {
			}
			return true
		}
	}
}

// chargeUpTo takes as much of n bytes from the account c as total leaves
// (0: no cap) and returns it.
func chargeUpTo(c, high *atomic.Int64, n, total int64) int64 {
	for {
		u := c.Load()
		k := n
		if total > 0 {
			k = min(n, total-u)
		}
		if k <= 0 {
			return 0
		}
		if c.CompareAndSwap(u, u+k) {
			for h := high.Load(); u+k > h && !high.CompareAndSwap(h, u+k); h = high.Load() {
			}
			return k
		}
	}
}

// Stats is the account as the metrics read it.
type Stats struct {
	Mem, File         int64 // bytes charged now
	MemHigh, FileHigh int64 // the most charged at once since start
	Responses         int64 // responses holding buffered bytes now
	Spilled           uint64
	FullResponse      uint64 // responses that met their own limits (backpressure)
	FullTotal         uint64 // responses that met the process's budget (backpressure)
	FileErrors        uint64
}

// Stats reads the account.
func (b *Budget) Stats() Stats {
	return Stats{
		Mem: b.mem.Load(), File: b.file.Load(), MemHigh: b.memHigh.Load(), FileHigh: b.fileHigh.Load(),
		Responses: b.responses.Load(), Spilled: b.spilled.Load(),
		FullResponse: b.fullResp.Load(), FullTotal: b.fullTotal.Load(), FileErrors: b.fileErrs.Load(),
	}
}
