package lb

import "time"

// SetAddrs changes the membership to addrs (duplicates ignored, order kept,
// filtered by Options.Partition). Backends whose address stays keep all
// their state; Attach is called for new addresses and Detach for removed
// ones, outside any lock. After Close, SetAddrs does nothing.
func (p *Pool) SetAddrs(addrs []string) {
	want := dedupe(addrs)
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.want = want
	p.mu.Unlock()
	p.apply()
}

// Close removes every backend (calling Detach) and makes later SetAddrs
// calls no-ops; Pick then returns nil. It does not stop Run: cancel its
// context for that. Requests in flight may still be released.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	p.mu.want = nil
	p.mu.Unlock()
	p.apply()
	p.cfg.Load().log.Debug("pool closed")
}

func dedupe(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	seen := make(map[string]struct{}, len(addrs))
	for _, a := range addrs {
		if _, dup := seen[a]; dup {
			continue
		}
		seen[a] = struct{}{}
		out = append(out, a)
	}
	return out
}

// apply makes the published membership match p.mu.want under the current
// partition. Attach runs outside p.mu: apply collects the addresses it
// lacks, attaches them unlocked, then retries; a concurrent change simply
// makes the last apply win. Backends attached but not needed in the end
// are detached, so Attach and Detach stay paired.
func (p *Pool) apply() {
	var fresh map[string]*Backend // attached, not yet published
	var removed []*Backend
	var added []string
	var cfg *config
	var restore []Health // restored health waiting for its address (health.go)
	for {
		now := p.cfg.Load().now().UnixNano() // the clock is a callback: read it unlocked
		p.mu.Lock()
		cfg = p.cfg.Load()
		target := cfg.part.Filter(p.mu.want)
		var missing []string
		for _, a := range target {
			if p.mu.byAddr[a] == nil && fresh[a] == nil {
				missing = append(missing, a)
			}
		}
		if len(missing) == 0 {
			removed, added = p.publishLocked(target, fresh)
			restore = p.takePendingLocked(added, now)
			p.mu.Unlock()
			p.applyHealth(restore)
			if len(added) > 0 || len(removed) > 0 {
				p.refresh() // reads the newest members, so order does not matter
			}
			break
		}
		p.mu.Unlock()
		if fresh == nil {
			fresh = make(map[string]*Backend, len(missing))
		}
		for _, a := range missing {
			b := &Backend{}
			b.addr, b.pool = a, p
			if cfg.attach != nil {
				b.Attachment = cfg.attach(a)
			}
			fresh[a] = b
		}
	}
	// What is left in fresh was attached but superseded: detach it too.
	detach := removed
	for _, b := range fresh {
		detach = append(detach, b)
	}
	if cfg.detach != nil {
		for _, b := range detach {
			cfg.detach(b.addr, b.Attachment)
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		gone := make([]string, len(removed))
		for i, b := range removed {
			gone[i] = b.addr
		}
		cfg.log.Info("backends changed", "added", added, "removed", gone,
			"backends", len(p.members.Load().list))
	}
}

// publishLocked builds and publishes the membership for target, taking new
// backends from fresh (and deleting them from it). It returns the backends
// removed and the addresses added. p.mu must be held.
func (p *Pool) publishLocked(target []string, fresh map[string]*Backend) (removed []*Backend, added []string) {
	old := p.members.Load().list
	if len(target) == len(old) {
		same := true
		for _, a := range target {
			if p.mu.byAddr[a] == nil {
				same = false
				break
			}
		}
		if same {
			return nil, nil // same set: keep order and snapshot
		}
	}
	list := make([]*Backend, 0, len(target))
	byAddr := make(map[string]*Backend, len(target))
	for _, a := range target {
		b := p.mu.byAddr[a]
		if b == nil {
			b = fresh[a]
			delete(fresh, a)
			added = append(added, a)
		}
		list = append(list, b)
		byAddr[a] = b
	}
	for _, b := range old {
		if byAddr[b.addr] == nil {
			removed = append(removed, b)
		}
	}
	p.mu.byAddr = byAddr
	p.members.Store(&members{list: list})
	return removed, added
}

// Reconfigure replaces the pool's options and keeps every backend's state.
// Turning passive checks off (Failures 0) ends all ejections; turning
// active checks off marks every backend up. A changed Partition re-filters
// the last addresses given. Run picks up new intervals at once, running a
// probe round and a resolution immediately.
func (p *Pool) Reconfigure(opts Options) {
	cfg := newConfig(opts)
	old := p.cfg.Swap(cfg)
	bs := p.members.Load().list
	if cfg.failures == 0 && old.failures != 0 {
		for _, b := range bs {
			b.mu.Lock()
			b.consec.Store(0)
			b.ejectedUntil.Store(0)
			b.mu.Unlock()
		}
	}
	if cfg.active == nil && old.active != nil {
		for _, b := range bs {
			b.mu.Lock()
			b.down.Store(false)
			b.mu.rise, b.mu.fall = 0, 0
			b.mu.Unlock()
		}
	}
	if cfg.part != old.part {
		p.apply()
	}
	p.refresh()
	p.mu.Lock()
	close(p.mu.reconf)
	p.mu.reconf = make(chan struct{})
	p.mu.Unlock()
	cfg.log.Debug("pool reconfigured", "algorithm", string(cfg.alg), "failures", cfg.failures,
		"cooldown", time.Duration(cfg.cooldown), "active", cfg.active != nil, "dns", cfg.resolve != nil)
}

// reconfigured returns a channel closed by the next Reconfigure.
func (p *Pool) reconfigured() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.reconf
}
