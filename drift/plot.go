package drift

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// binsPerOctave is the plot's resolution: each point is the mean KL of the
// positions in one of these logarithmic bins.
const binsPerOctave = 4

// Curve returns a series' KL against position for a log-log plot: the mean
// over logarithmic bins of positions (1-based), the bins' geometric
// centres, bins whose mean is 0 left out (a log axis cannot show them).
func Curve(s Series) (pos, kl []float64) {
	n := len(s.KL)
	lo := 0
	for b := 1; lo < n; b++ {
		hi := min(n, int(math.Ceil(math.Pow(2, float64(b)/binsPerOctave))))
		if hi <= lo {
			continue
		}
		var sum float64
		for _, v := range s.KL[lo:hi] {
			sum += float64(v)
		}
		if mean := sum / float64(hi-lo); mean > 0 {
			pos = append(pos, math.Sqrt(float64(lo+1)*float64(hi)))
			kl = append(kl, mean)
		}
		lo = hi
	}
	return pos, kl
}

// powerTicks labels a log axis's powers of ten as 1e-05, 0.001, 100,
// 1000 (LogTicks writes 1e-4 as 0.00009999…).
type powerTicks struct{}

func (powerTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = fmt.Sprintf("%g", math.Pow(10, math.Round(math.Log10(t.Value))))
		}
	}
	return ticks
}

// palette tells the series apart (the Okabe–Ito colours, then greys).
var palette = []color.Color{
	color.RGBA{0, 0, 0, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255},
	color.RGBA{0, 158, 115, 255}, color.RGBA{240, 228, 66, 255}, color.RGBA{0, 114, 178, 255},
	color.RGBA{213, 94, 0, 255}, color.RGBA{204, 121, 167, 255},
}

// Plot writes the KL of every series against position, log-log, one line
// per series, to path (the format from its extension: .png, .svg, .pdf).
func Plot(r *Result, title, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "position (tokens)"
	p.Y.Label.Text = "mean KL(reference ‖ mode), nats"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = powerTicks{}, powerTicks{}
	// Bottom right: the lines rise from the left, and at long positions
	// even the closest modes stay above the legend's corner.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.Padding = vg.Points(1)
	p.Add(plotter.NewGrid())
	drawn := 0
	for i, s := range r.Series {
		x, y := Curve(s)
		if len(x) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(x))
		for k := range x {
			pts[k].X, pts[k].Y = x[k], y[k]
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		if i >= len(palette) {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(line)
		label := s.Mode
		if s.Window > 0 {
			label += fmt.Sprintf(" L=%d", s.Window)
		}
		p.Legend.Add(label, line)
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("drift: no mode differs from the reference: nothing to plot on a log scale")
	}
	return p.Save(7*vg.Inch, 5*vg.Inch, path)
}
