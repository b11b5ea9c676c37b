package estimator

import "math"

// dstat is a time-decayed mean and variance. A sample observed age ago has
// weight 2^(-age/halfLife): after one half-life an old sample counts half as
// much as a new one. The update is West's weighted incremental algorithm
// with every earlier weight scaled by the decay factor first.
type dstat struct {
	w    float64 // sum of decayed weights
	mean float64
	m2   float64 // decayed sum of squared deviations; variance = m2 / w
	last int64   // unix ns of the last update
}

// decay returns the factor for now - last, with invHalf = 1/halfLife in 1/ns.
// Time never runs backwards: an out-of-order now decays nothing.
func decay(last, now int64, invHalf float64) float64 {
	if now <= last {
		return 1
	}
	return exp2neg(float64(now-last) * invHalf)
}

// exp2neg returns 2^-x for x ≥ 0 with a relative error below 2e-7, about
// four times faster than math.Exp2: x = n + f with n an integer and
// |f| ≤ 1/2; 2^-n is built in the exponent bits and 2^-f = e^(-f·ln2) is a
// degree-6 Taylor polynomial. Integer x (whole half-lives) is exact.
func exp2neg(x float64) float64 {
	if !(x < 1000) { // also NaN
		return 0
	}
	n := math.Floor(x + 0.5)
	t := -(x - n) * math.Ln2 // |t| ≤ 0.347
	p := 1 + t*(1+t*(1.0/2+t*(1.0/6+t*(1.0/24+t*(1.0/120+t*(1.0/720))))))
	return p * math.Float64frombits(uint64(1023-int64(n))<<52)
}

// addUpTo adds x, first lowered so that the mean ends at most at limit
// (when the mean was already below it): the sample counts as the value that
// lands the mean on the limit, so the variance stays that of the samples as
// counted. It returns the value counted.
func (d *dstat) addUpTo(x float64, now int64, invHalf, limit float64) float64 {
	if x > d.mean && d.mean <= limit {
		w := 1.0
		if d.w > 0 {
			w += d.w * decay(d.last, now, invHalf)
		}
		x = min(x, d.mean+(limit-d.mean)*w)
	}
	d.add(x, now, invHalf)
	return x
}

func (d *dstat) add(x float64, now int64, invHalf float64) {
	if d.w > 0 {
		if f := decay(d.last, now, invHalf); f != 1 {
			d.w *= f
			d.m2 *= f
		}
	}
	if now > d.last {
		d.last = now
	}
	d.w++
	delta := x - d.mean
	d.mean += delta / d.w
	d.m2 += delta * (x - d.mean)
}

// at returns d decayed to now, without changing d.
func (d *dstat) at(now int64, invHalf float64) dstat {
	out := *d
	if f := decay(d.last, now, invHalf); f != 1 {
		out.w *= f
		out.m2 *= f
		out.last = now
	}
	return out
}

// merge folds o into d (Chan et al.'s parallel combination); both must be
// decayed to the same time.
func (d *dstat) merge(o dstat) {
	if o.w <= 0 {
		return
	}
	if d.w <= 0 {
		*d = o
		return
	}
	w := d.w + o.w
	delta := o.mean - d.mean
	d.mean += delta * o.w / w
	d.m2 += o.m2 + delta*delta*d.w*o.w/w
	d.w = w
	if o.last > d.last {
		d.last = o.last
	}
}

func (d *dstat) variance() float64 {
	if d.w <= 0 || d.m2 <= 0 {
		return 0
	}
	return d.m2 / d.w
}

// batched is a dstat fed in batches: Observe adds a sample with three
// float additions to pend (no decay, no division), and the refresh folds the
// batch in as if every pending sample arrived at the refresh instant. With
// the default 100ms refresh and half-lives of seconds, a sample's weight is
// off by at most 2^(0.1s/halfLife) (1.4% for Q's 5s, 0.2% for 30s), and the
// per-class mean and Q are only read as of the last refresh anyway.
type batched struct {
	d    dstat
	n    float64 // pending samples
	s1   float64 // Σ(x − k)
	s2   float64 // Σ(x − k)², shifted by k for precision
	k    float64
	kSet bool
}

func (b *batched) add(x float64) {
	if !b.kSet {
		b.k, b.kSet = x, true
	}
	dx := x - b.k
	b.n++
	b.s1 += dx
	b.s2 += dx * dx
}

// pending returns the pending batch as a dstat at now, without folding it.
func (b *batched) pending(now int64) dstat {
	if b.n <= 0 {
		return dstat{}
	}
	return dstat{w: b.n, mean: b.k + b.s1/b.n, m2: max(0, b.s2-b.s1*b.s1/b.n), last: now}
}

// take returns the pending batch as a dstat at now and clears it,
// leaving d as it is: for a statistic that is not decayed by time (QNow).
func (b *batched) take(now int64) dstat {
	p := b.pending(now)
	b.n, b.s1, b.s2 = 0, 0, 0
	return p
}

// fold merges the pending batch into d at now and returns d as of now.
func (b *batched) fold(now int64, invHalf float64) dstat {
	d := b.d.at(now, invHalf)
	if b.n > 0 {
		mean := b.k + b.s1/b.n
		m2 := max(0, b.s2-b.s1*b.s1/b.n)
		d.merge(dstat{w: b.n, mean: mean, m2: m2, last: now})
		b.n, b.s1, b.s2 = 0, 0, 0
		b.k = d.mean
	}
	if now > d.last {
		d.last = now
	}
	b.d = d
	return d
}

// fitAcc holds decayed sums for the least-squares fit y = c + α·x, with
// x = io and y = measured − queue − cpu.
type fitAcc struct {
	w, sx, sy, sxx, sxy float64
	last                int64
}

// fitState is a shard's α-fit state: decayed sums and pending ones.
type fitState struct{ acc, pend fitAcc }

// add adds a sample without decay (pending sums); see fold.
func (a *fitAcc) add(x, y float64) {
	a.w++
	a.sx += x
	a.sy += y
	a.sxx += x * x
	a.sxy += x * y
}

// fold decays a to now and adds the pending sums p, which it clears.
func (a *fitAcc) fold(p *fitAcc, now int64, invHalf float64) {
	f := decay(a.last, now, invHalf)
	a.w = f*a.w + p.w
	a.sx = f*a.sx + p.sx
	a.sy = f*a.sy + p.sy
	a.sxx = f*a.sxx + p.sxx
	a.sxy = f*a.sxy + p.sxy
	if now > a.last {
		a.last = now
	}
	*p = fitAcc{}
}

func (a *fitAcc) mergeAt(o fitAcc, now int64, invHalf float64) {
	f := decay(o.last, now, invHalf)
	a.w += f * o.w
	a.sx += f * o.sx
	a.sy += f * o.sy
	a.sxx += f * o.sxx
	a.sxy += f * o.sxy
}

// slope returns α = cov(x,y)/var(x) when there is enough spread in x.
func (a *fitAcc) slope(minWeight float64) (float64, bool) {
	if a.w < minWeight {
		return 0, false
	}
	mx, my := a.sx/a.w, a.sy/a.w
	vx := a.sxx/a.w - mx*mx
	if !(vx > 1e-6*mx*mx) || vx <= 0 {
		return 0, false
	}
	return (a.sxy/a.w - mx*my) / vx, true
}
