package scenario

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot file names in a peer's directory.
const (
	ArrivalPNG = "arrival.png"
	P95PNG     = "p95.png"
	UtilPNG    = "util.png"
)

var palette = []color.Color{
	color.RGBA{R: 0xc8, G: 0x96, B: 0x00, A: 0xff}, // gold
	color.RGBA{R: 0x60, G: 0x70, B: 0x80, A: 0xff}, // slate
	color.RGBA{R: 0xa0, G: 0x52, B: 0x2d, A: 0xff}, // bronze
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// classColors gives each class its colour: gold, silver and bronze by
// name, the others from the rest of the palette in order.
func classColors(names []string) []color.Color {
	out := make([]color.Color, len(names))
	other := 0
	for i, n := range names {
		switch {
		case strings.Contains(n, "gold"):
			out[i] = palette[0]
		case strings.Contains(n, "silver"):
			out[i] = palette[1]
		case strings.Contains(n, "bronze"):
			out[i] = palette[2]
		default:
			out[i] = palette[3+other%(len(palette)-3)]
			other++
		}
	}
	return out
}

var (
	black  = color.RGBA{A: 0xff}
	grey   = color.RGBA{R: 0x90, G: 0x90, B: 0x90, A: 0xff}
	dashed = []vg.Length{vg.Points(5), vg.Points(3)}
	dotted = []vg.Length{vg.Points(1.5), vg.Points(2.5)}
)

// PlotInfo labels the plots.
type PlotInfo struct {
	Scenario, Peer string
	Capacity       float64 // req/s; 0 or Inf: not drawn
	Duration       time.Duration
}

// WritePlots draws the three plots of a series into dir.
func WritePlots(dir string, s *Series, info PlotInfo) error {
	for _, p := range []struct {
		name string
		fn   func(*Series, PlotInfo) (*plot.Plot, error)
	}{{ArrivalPNG, arrivalPlot}, {P95PNG, p95Plot}, {UtilPNG, utilPlot}} {
		pl, err := p.fn(s, info)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if err := pl.Save(10*vg.Inch, 5*vg.Inch, filepath.Join(dir, p.name)); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

func newPlot(title, ylabel string, info PlotInfo, s *Series) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s — %s: %s", info.Scenario, info.Peer, title)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.X.Min = 0
	p.X.Max = float64(max(s.Seconds, int(math.Ceil(info.Duration.Seconds()))))
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

func line(xys plotter.XYs, c color.Color, dashes []vg.Length, width vg.Length) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color, l.Dashes, l.Width = c, dashes, width
	return l, nil
}

func hline(y, x0, x1 float64, c color.Color, dashes []vg.Length) (*plotter.Line, error) {
	return line(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}}, c, dashes, vg.Points(1.2))
}

// series of one class: y(row) at each second's midpoint, skipping rows
// where keep is false.
func classXYs(s *Series, c int, y func(*Row) float64, keep func(*Row) bool) plotter.XYs {
	var xys plotter.XYs
	for t := 0; t < s.Seconds; t++ {
		r := s.At(t, c)
		if keep != nil && !keep(r) {
			continue
		}
		v := y(r)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		xys = append(xys, plotter.XY{X: float64(t) + 0.5, Y: v})
	}
	return xys
}

// arrivalPlot: per class, offered (solid) and admitted (dashed) arrivals
// per second; the total completed per second (grey) and the capacity.
func arrivalPlot(s *Series, info PlotInfo) (*plot.Plot, error) {
	p := newPlot("arrivals vs admitted per class", "requests/s", info, s)
	p.Y.Min = 0
	nc := len(s.Classes)
	cols := classColors(s.Classes)
	classColor := func(c int) color.Color { return cols[c] }
	for c := 0; c < nc; c++ {
		off, err := line(classXYs(s, c, func(r *Row) float64 { return float64(r.Offered) }, nil), classColor(c), nil, vg.Points(1.5))
		if err != nil {
			return nil, err
		}
		adm, err := line(classXYs(s, c, func(r *Row) float64 { return float64(r.Admitted) }, nil), classColor(c), dashed, vg.Points(1.5))
		if err != nil {
			return nil, err
		}
		p.Add(off, adm)
		p.Legend.Add(s.Classes[c]+" offered", off)
		p.Legend.Add(s.Classes[c]+" admitted", adm)
	}
	done, err := line(classXYs(s, nc, func(r *Row) float64 { return float64(r.Completed) }, nil), grey, nil, vg.Points(1))
	if err != nil {
		return nil, err
	}
	p.Add(done)
	p.Legend.Add("completed (all)", done)
	// Headroom for the legend above the data.
	top := 0.0
	for t := 0; t < s.Seconds; t++ {
		for c := 0; c < nc; c++ {
			top = math.Max(top, float64(s.At(t, c).Offered))
		}
		top = math.Max(top, float64(s.At(t, nc).Completed))
	}
	if info.Capacity > 0 && !math.IsInf(info.Capacity, 0) {
		top = math.Max(top, info.Capacity)
	}
	p.Y.Max = math.Max(top, 1) * (1 + 0.06*float64(2*nc+2))
	if info.Capacity > 0 && !math.IsInf(info.Capacity, 0) {
		cl, err := hline(info.Capacity, p.X.Min, p.X.Max, black, dotted)
		if err != nil {
			return nil, err
		}
		p.Add(cl)
		p.Legend.Add(fmt.Sprintf("capacity %.0f/s", info.Capacity), cl)
	}
	return p, nil
}

// p95Plot: per class, the admitted p95 per second (log scale, ms) with
// glyphs on seconds with ≥ MinSamples samples, and each class's target.
func p95Plot(s *Series, info PlotInfo) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("admitted p95 vs target (points: seconds with ≥ %d samples)", MinSamples), "p95 (ms, log)", info, s)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	ms := func(r *Row) float64 { return math.Max(float64(r.P95)/float64(time.Millisecond), 0.1) }
	lo, hi := math.Inf(1), 0.0
	targets := map[time.Duration]int{}
	nc := len(s.Classes)
	cols := classColors(s.Classes)
	classColor := func(c int) color.Color { return cols[c] }
	for c := 0; c < nc; c++ {
		// One line per run of consecutive seconds with samples, so a class
		// that was shut out for a while shows a gap, not a straight line.
		xys := classXYs(s, c, ms, func(r *Row) bool { return r.Samples > 0 })
		for i, start := 0, 0; i < len(xys); i++ {
			if i+1 < len(xys) && xys[i+1].X-xys[i].X < 1.5 {
				continue
			}
			seg := xys[start : i+1]
			start = i + 1
			l, err := line(seg, classColor(c), nil, vg.Points(1.5))
			if err != nil {
				return nil, err
			}
			p.Add(l)
			if seg[0] == xys[0] {
				p.Legend.Add(s.Classes[c]+" p95", l)
			}
		}
		for _, xy := range xys {
			lo, hi = math.Min(lo, xy.Y), math.Max(hi, xy.Y)
		}
		if pts := classXYs(s, c, ms, func(r *Row) bool { return r.Samples >= MinSamples }); len(pts) > 0 {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: classColor(c), Radius: vg.Points(1.8), Shape: draw.CircleGlyph{}}
			p.Add(sc)
		}
		if t := s.At(0, c).Target; t > 0 {
			if _, seen := targets[t]; !seen {
				targets[t] = c
			}
		}
	}
	for t, c := range targets {
		col := classColor(c)
		label := fmt.Sprintf("target %v", t)
		if len(targets) == 1 {
			col = black
		} else {
			label = fmt.Sprintf("target %v (%s)", t, s.Classes[c])
		}
		y := float64(t) / float64(time.Millisecond)
		lo, hi = math.Min(lo, y), math.Max(hi, y)
		l, err := hline(y, p.X.Min, p.X.Max, col, dashed)
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(label, l)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 1000
	}
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
	return p, nil
}

// utilPlot: the farm's utilisation per second and the goodput as a
// fraction of capacity.
func utilPlot(s *Series, info PlotInfo) (*plot.Plot, error) {
	p := newPlot("backend utilisation, farm responses and goodput (÷ capacity)", "fraction", info, s)
	p.Y.Min = 0
	p.Y.Max = 1.2
	nc := len(s.Classes)
	ux := classXYs(s, nc, func(r *Row) float64 { return r.Util }, nil)
	if len(ux) > 0 {
		l, err := line(ux, black, nil, vg.Points(1.5))
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add("farm utilisation", l)
	}
	if info.Capacity > 0 && !math.IsInf(info.Capacity, 0) {
		fx := classXYs(s, nc, func(r *Row) float64 { return float64(r.FarmDone) / info.Capacity }, func(r *Row) bool { return r.FarmDone >= 0 })
		if len(fx) > 0 {
			l, err := line(fx, grey, dashed, vg.Points(1.2))
			if err != nil {
				return nil, err
			}
			p.Add(l)
			p.Legend.Add("farm responses / capacity", l)
		}
		gx := classXYs(s, nc, func(r *Row) float64 { return float64(r.Goodput) / info.Capacity }, nil)
		l, err := line(gx, palette[4], nil, vg.Points(1.5))
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add("goodput / capacity", l)
		for _, xy := range gx {
			p.Y.Max = math.Max(p.Y.Max, xy.Y*1.05)
		}
	}
	return p, nil
}
