package ttft

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"kvwin/cmd/kvwin/bench/svgplot"
)

// policyColours are fixed per policy so charts of different runs read
// alike; they are distinct for the colour-blind too (Tableau 10's first
// five hues, told apart by lightness as well as hue).
var policyColours = map[Policy]string{
	FullNoCache: "#d62728", // red: the cost to avoid
	Full:        "#1f77b4",
	Sliding:     "#ff7f0e",
	Sink:        "#2ca02c",
	Memory:      "#9467bd",
}

// spareColours colour policies the table above does not know.
var spareColours = []string{"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

func colourOf(p Policy, i int) string {
	if c, ok := policyColours[p]; ok {
		return c
	}
	return spareColours[i%len(spareColours)]
}

// WriteSVG draws ttft.svg: TTFT (log scale, since full-nocache's seconds
// and sink's milliseconds must both be readable) against history tokens,
// one polyline per policy in its colour, a legend, labelled axes with
// ticks, a title and, if budget > 0, a dashed line at the budget. Turns
// with no positive TTFT cannot be placed on a log axis and are skipped.
// It is plain SVG 1.1, no scripts or external resources.
func WriteSVG(w io.Writer, r Report, budget int) error {
	xmax, ylo, yhi := bounds(r, budget)
	p := svgplot.New(w, svgplot.Chart{Title: "Time to first token against conversation length",
		XLabel: "conversation history (tokens)", YLabel: "TTFT (ms, log scale)", XMax: xmax, YLo: ylo, YHi: yhi, Classes: true})
	p.Open()

	// Grid and ticks first, so the lines draw over them.
	for _, v := range linearTicks(xmax) {
		x := p.X(v)
		p.GridX(x)
		p.Printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333333"/>`+"\n", x, svgplot.Bottom, x, svgplot.Bottom+5)
		p.Printf(`<text class="xtick" x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, svgplot.Bottom+19, tickLabel(v))
	}
	for _, v := range logTicks(ylo, yhi) {
		y := p.Y(v)
		p.GridY(y)
		p.Printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333333"/>`+"\n", svgplot.Left-5, y, svgplot.Left, y)
		p.Printf(`<text class="ytick" x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgplot.Left-8, y, tickLabel(v))
	}
	p.Frame()
	if budget > 0 {
		x := p.X(float64(budget))
		p.Printf(`<line class="budget" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555555" stroke-dasharray="6 4"/>`+"\n", x, svgplot.Top, x, svgplot.Bottom)
		p.Printf(`<text x="%.1f" y="%d" fill="#555555">budget %d</text>`+"\n", x+4, svgplot.Top+14, budget)
	}

	for i, pr := range r.Policies {
		colour := colourOf(pr.Policy, i)
		var pts strings.Builder
		for _, t := range pr.Turns {
			if t.TTFTMs > 0 {
				fmt.Fprintf(&pts, "%.1f,%.1f ", p.X(float64(t.HistoryTokens)), p.Y(t.TTFTMs))
			}
		}
		name := svgplot.Escape(string(pr.Policy))
		p.Printf(`<polyline class="series" data-policy="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`+"\n",
			name, colour, strings.TrimSpace(pts.String()))
		y := svgplot.Top + 8 + 22*i
		p.Printf(`<g class="legend" data-policy="%s"><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d" dominant-baseline="middle">%s</text></g>`+"\n",
			name, svgplot.LegendLeft, y, svgplot.LegendLeft+24, y, colour, svgplot.LegendLeft+32, y, name)
	}
	return p.Close()
}

// bounds returns the x axis' end and the y axis' decades: x from 0 to a
// round number past the largest history (and the budget), y from the
// decade below the fastest turn to the decade above the slowest.
func bounds(r Report, budget int) (xmax, ylo, yhi float64) {
	xmax = float64(budget)
	ylo, yhi = math.Inf(1), 0
	for _, pr := range r.Policies {
		for _, t := range pr.Turns {
			xmax = max(xmax, float64(t.HistoryTokens))
			if t.TTFTMs > 0 {
				ylo, yhi = min(ylo, t.TTFTMs), max(yhi, t.TTFTMs)
			}
		}
	}
	step := xstep(max(xmax, 1))
	xmax = math.Ceil(max(xmax, 1)/step) * step
	if yhi == 0 { // nothing to plot: an empty decade
		ylo, yhi = 1, 10
	}
	ylo = math.Pow(10, math.Floor(math.Log10(ylo)))
	yhi = math.Pow(10, math.Ceil(math.Log10(yhi)))
	if yhi <= ylo {
		yhi = ylo * 10
	}
	return xmax, ylo, yhi
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// xstep is the x axis' tick step: a round number giving at most 9 ticks.
func xstep(xmax float64) float64 { return niceCeil(xmax / 8) }

// linearTicks returns 0, s, 2s, … up to xmax, s = xstep(xmax).
func linearTicks(xmax float64) []float64 {
	step := xstep(xmax)
	var out []float64
	for i := 0; float64(i)*step <= xmax*(1+1e-9); i++ {
		out = append(out, float64(i)*step)
	}
	return out
}

// logTicks returns 1, 2 and 5 times each power of ten in [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for d := lo; d <= hi*(1+1e-9); d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * d; v <= hi*(1+1e-9) {
				out = append(out, v)
			}
		}
	}
	return out
}

// tickLabel prints a tick value in plain notation without float noise or
// trailing zeros: 0.5, 20, 1500, 10000.
func tickLabel(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}
