package svgplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// The axes span the plot: x from 0 at its left edge to XMax at its right,
// y (log scale) from YLo at its bottom to YHi at its top, a decade a
// third of the way for three decades.
func TestAxesSpanThePlot(t *testing.T) {
	p := New(nil, Chart{XMax: 2000, YLo: 1, YHi: 1000})
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"x of 0", p.X(0), Left},
		{"x of XMax", p.X(2000), Right},
		{"x halfway", p.X(1000), (Left + Right) / 2},
		{"y of YLo", p.Y(1), Bottom},
		{"y of YHi", p.Y(1000), Top},
		{"y of a decade up", p.Y(10), Bottom - float64(Bottom-Top)/3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := tc.got - tc.want; d > 1e-9 || d < -1e-9 {
				t.Errorf("%v, want %v", tc.got, tc.want)
			}
		})
	}
}

// A chart is well-formed SVG with its title and labels; with Classes they
// carry their class attributes, without they carry none.
func TestChartIsWellFormedAndClassedOnRequest(t *testing.T) {
	for _, classes := range []bool{false, true} {
		var b bytes.Buffer
		p := New(&b, Chart{Title: "the title", XLabel: "the x", YLabel: "the y", XMax: 1, YLo: 1, YHi: 10, Classes: classes})
		p.Open()
		p.GridX(p.X(0.5))
		p.GridY(p.Y(5))
		p.Frame()
		p.Printf(`<text x="1" y="1">%s</text>`+"\n", Escape(`a<b & "c"`))
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		texts := map[string]string{} // text → class
		dec := xml.NewDecoder(&b)
		var class string
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("classes %v: not well-formed: %v", classes, err)
			}
			switch tk := tok.(type) {
			case xml.StartElement:
				class = ""
				for _, a := range tk.Attr {
					if a.Name.Local == "class" {
						class = a.Value
					}
				}
			case xml.CharData:
				if s := strings.TrimSpace(string(tk)); s != "" {
					texts[s] = class
				}
			}
		}
		for text, want := range map[string]string{"the title": "title", "the x": "xlabel", "the y": "ylabel", `a<b & "c"`: ""} {
			got, ok := texts[text]
			if !classes && text != `a<b & "c"` {
				want = ""
			}
			if !ok || got != want {
				t.Errorf("classes %v: %q has class %q (found %v), want %q", classes, text, got, ok, want)
			}
		}
	}
}
