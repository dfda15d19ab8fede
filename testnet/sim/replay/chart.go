package replay

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WriteChart plots, per policy and for the fluid bound, the share of
// offered idle GPU time that was leased in each time bucket. The format
// follows the file extension: .png, .svg or .pdf.
func (r *Report) WriteChart(path string) error {
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
	add := func(name string, series []float64, c color.Color, dashed bool) error {
		pts := make(plotter.XYs, 0, len(series))
		for i, v := range series {
			if i >= len(r.offered) {
				break
			}
			y := 0.0
			if r.offered[i] > 0 {
				y = v / r.offered[i]
			}
			pts = append(pts, plotter.XY{X: (time.Duration(i) * r.bucket).Hours() / 24, Y: y})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("replay: chart: %w", err)
		}
		l.Color = c
		l.Width = vg.Points(1)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	for i, pol := range r.Policies {
		if err := add(pol.Policy, pol.util, colors[i%len(colors)], false); err != nil {
			return err
		}
	}
	if err := add("bound (fluid)", r.bound, color.Gray{Y: 0x60}, true); err != nil {
		return err
	}
	p.Legend.Top = true
	if err := p.Save(10*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("replay: chart %s: %w", path, err)
	}
	return nil
}
