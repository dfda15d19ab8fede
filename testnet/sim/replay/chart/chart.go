// Package chart draws the market replay's utilisation chart (gonum/plot).
// It is its own package so that only the simulator links the plotting
// library and its fonts: gonum/plot parses its fonts when the program
// starts, which every gpumesh daemon would pay for.
package chart

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"github.com/gpumesh/gpumesh/testnet/sim/replay"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Write plots r's utilisation (replay.Report.Utilisation) to path; the
// format follows the file extension: .png, .svg or .pdf. It is a
// replay.ChartWriter.
func Write(r *replay.Report, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".png", ".svg", ".pdf":
	default:
		return fmt.Errorf("replay: chart %s: want a .png, .svg or .pdf file", path)
	}
	p := plot.New()
	p.Title.Text = "Filled share of offered idle GPU time"
	if r.Trace != "" {
		p.Title.Text += " — " + filepath.Base(r.Trace)
	}
	p.X.Label.Text = "days since " + r.Start.Format("2006-01-02")
	p.Y.Label.Text = "leased / offered idle"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 255}}
	for i, s := range r.Utilisation() {
		pts := make(plotter.XYs, len(s.Days))
		for j := range s.Days {
			pts[j] = plotter.XY{X: s.Days[j], Y: s.Share[j]}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("replay: chart: %w", err)
		}
		l.Color = colors[i%len(colors)]
		l.Width = vg.Points(1)
		if s.Dashed {
			l.Color = color.Gray{Y: 0x60}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	p.Legend.Top = true
	if err := p.Save(10*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("replay: chart %s: %w", path, err)
	}
	return nil
}
