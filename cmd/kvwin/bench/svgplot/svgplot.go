// Package svgplot is the chart the bench commands draw (bench ttft's
// ttft.svg, bench fleet's fleet.svg): one plot, its x axis linear from 0,
// its y axis a log scale, the legend right of it, in plain SVG 1.1 with
// no scripts or external resources.
package svgplot

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
)

// The chart's geometry, in SVG user units (pixels at 100% zoom). The
// legend sits right of the plot, outside it, so it never hides a line.
const (
	Width, Height = 960, 560
	Left, Right   = 84, 748 // the plot's edges
	Top, Bottom   = 56, 492
	LegendLeft    = 772
)

// Chart is what a chart shows: its title, its axes' labels and ranges (x
// from 0 to XMax, y from YLo to YHi on a log scale). The title and labels
// are written as they are: text without markup. Classes: the title and
// the axis labels carry class attributes (title, xlabel, ylabel) for
// tests and style sheets to find them by.
type Chart struct {
	Title, XLabel, YLabel string
	XMax, YLo, YHi        float64
	Classes               bool
}

// Plot writes one chart to a writer: Open, then the grid and the series
// (Printf, X and Y place them), Frame, the legend, Close. Not safe for
// concurrent use.
type Plot struct {
	c Chart
	b *bufio.Writer
}

// New starts a chart c on w; nothing is written before Open.
func New(w io.Writer, c Chart) *Plot { return &Plot{c: c, b: bufio.NewWriter(w)} }

// X is where the value v of the x axis is drawn.
func (p *Plot) X(v float64) float64 { return Left + v/p.c.XMax*(Right-Left) }

// Y is where the value v of the y axis is drawn (log scale).
func (p *Plot) Y(v float64) float64 {
	return Bottom - (math.Log10(v)-math.Log10(p.c.YLo))/(math.Log10(p.c.YHi)-math.Log10(p.c.YLo))*(Bottom-Top)
}

// Printf writes an element of the chart's own.
func (p *Plot) Printf(format string, args ...any) { fmt.Fprintf(p.b, format, args...) }

// class is the class attribute named name, with its trailing space, if
// the chart has classes.
func (p *Plot) class(name string) string {
	if !p.c.Classes {
		return ""
	}
	return `class="` + name + `" `
}

// Open writes the document's start: the svg element, a white background
// and the title above the plot.
func (p *Plot) Open() {
	p.Printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		Width, Height, Width, Height)
	p.Printf(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", Width, Height)
	p.Printf(`<text %sx="%d" y="30" text-anchor="middle" font-size="16" font-weight="bold">%s</text>`+"\n",
		p.class("title"), (Left+Right)/2, p.c.Title)
}

// GridX draws the vertical grid line at x (user units); GridY the
// horizontal one at y. Drawn first, the series' lines go over them.
func (p *Plot) GridX(x float64) {
	p.Printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e6e6e6"/>`+"\n", x, Top, x, Bottom)
}

// GridY: see GridX.
func (p *Plot) GridY(y float64) {
	p.Printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e6e6e6"/>`+"\n", Left, y, Right, y)
}

// Frame draws the plot's border and the axes' labels.
func (p *Plot) Frame() {
	p.Printf(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>`+"\n", Left, Top, Right-Left, Bottom-Top)
	p.Printf(`<text %sx="%d" y="%d" text-anchor="middle">%s</text>`+"\n", p.class("xlabel"), (Left+Right)/2, Bottom+44, p.c.XLabel)
	p.Printf(`<text %stransform="translate(24 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", p.class("ylabel"), (Top+Bottom)/2, p.c.YLabel)
}

// Close ends the document and flushes it to the writer.
func (p *Plot) Close() error {
	p.Printf("</svg>\n")
	return p.b.Flush()
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

// Escape makes s safe in an attribute's value or an element's text.
func Escape(s string) string { return escaper.Replace(s) }
