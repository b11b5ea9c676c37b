package scenario

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// AutoscalePNG is the closed-loop run's plot: servers, load, drop ratio
// and admitted p95 over time, stacked.
const AutoscalePNG = "autoscale.png"

var (
	blue  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	green = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	red   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

func writeAutoscalePlots(dir string, r *AutoscaleResult) error {
	s, c := r.Series, r.Config
	info := PlotInfo{Scenario: "autoscale", Peer: "sentry", Duration: c.Before + c.High + c.After}
	total := len(s.Classes)
	perSecond := func(y func(t int) float64) plotter.XYs {
		var xys plotter.XYs
		for t := 0; t < s.Seconds; t++ {
			if v := y(t); !math.IsNaN(v) {
				xys = append(xys, plotter.XY{X: float64(t) + 0.5, Y: v})
			}
		}
		return xys
	}
	var plots []*plot.Plot
	add := func(p *plot.Plot, xys plotter.XYs, col color.Color, dashes []vg.Length, label string) error {
		if len(xys) == 0 {
			return nil
		}
		l, err := line(xys, col, dashes, vg.Points(1.5))
		if err != nil {
			return err
		}
		p.Add(l)
		p.Legend.Add(label, l)
		return nil
	}
	phases := func(p *plot.Plot, ymax float64) error {
		for _, at := range []time.Duration{r.StepAt, r.FallAt} {
			l, err := line(plotter.XYs{{X: at.Seconds(), Y: 0}, {X: at.Seconds(), Y: ymax}}, grey, dotted, vg.Points(1))
			if err != nil {
				return err
			}
			p.Add(l)
		}
		return nil
	}

	// Servers: in DNS, and what sentry said it needs.
	p := newPlot("servers in DNS and sentry_provision_servers_needed", "servers", info, s)
	p.Y.Min, p.Y.Max = 0, float64(c.Max)+1
	if err := add(p, perSecond(func(t int) float64 { return float64(r.Servers[t]) }), black, nil, "servers in DNS"); err != nil {
		return err
	}
	if err := add(p, perSecond(func(t int) float64 { return r.Needed[t] }), blue, dashed, "servers needed (sentry)"); err != nil {
		return err
	}
	if err := phases(p, p.Y.Max); err != nil {
		return err
	}
	plots = append(plots, p)

	// Load: offered, admitted, and the capacity of the servers in DNS.
	p = newPlot("offered and admitted load", "requests/s", info, s)
	p.Y.Min = 0
	capa := float64(c.Slots) / c.Service.Seconds()
	if err := add(p, perSecond(func(t int) float64 { return float64(s.At(t, total).Offered) }), black, nil, "offered"); err != nil {
		return err
	}
	if err := add(p, perSecond(func(t int) float64 { return float64(s.At(t, total).Admitted) }), green, nil, "admitted"); err != nil {
		return err
	}
	if err := add(p, perSecond(func(t int) float64 { return capa * float64(r.Servers[t]) }), grey, dashed, "capacity of the servers in DNS"); err != nil {
		return err
	}
	if err := phases(p, c.Rate*c.Step*1.3); err != nil {
		return err
	}
	plots = append(plots, p)

	// Drop ratio per second, and the 5% line.
	p = newPlot("drop ratio (rejected ÷ offered, per second)", "fraction", info, s)
	p.Y.Min, p.Y.Max = 0, 1
	if err := add(p, perSecond(func(t int) float64 { return dropRatio(s.At(t, total)) }), red, nil, "drop ratio"); err != nil {
		return err
	}
	if l, err := hline(0.05, p.X.Min, p.X.Max, black, dashed); err == nil {
		p.Add(l)
		p.Legend.Add("5%", l)
	}
	if err := phases(p, 1); err != nil {
		return err
	}
	plots = append(plots, p)

	// Admitted p95 against the SLA, the scenario runner's plot.
	p, err := p95Plot(s, info)
	if err != nil {
		return err
	}
	plots = append(plots, p)

	const w, h = 10 * vg.Inch, 3.2 * vg.Inch
	img := vgimg.New(w, h*vg.Length(len(plots)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	canvases := plot.Align([][]*plot.Plot{{plots[0]}, {plots[1]}, {plots[2]}, {plots[3]}}, tiles, dc)
	for i, pl := range plots {
		pl.Draw(canvases[i][0])
	}
	return writeFileWith(filepath.Join(dir, AutoscalePNG), func(wr io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(wr)
		if err != nil {
			return fmt.Errorf("%s: %w", AutoscalePNG, err)
		}
		return nil
	})
}
