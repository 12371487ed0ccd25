package ttft

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// element is one SVG element as the tests see it.
type element struct {
	name  string
	attrs map[string]string
	text  string
	group string // data-policy of the enclosing legend group, if any
}

// parseSVG returns every element of an SVG document, failing the test if
// it is not well-formed XML.
func parseSVG(t *testing.T, doc []byte) []element {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var out []element
	var stack []int // indexes into out of the open elements
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := element{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			for _, i := range stack {
				if out[i].name == "g" && out[i].attrs["class"] == "legend" {
					e.group = out[i].attrs["data-policy"]
				}
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(tk)
			}
		}
	}
	return out
}

// reportOf builds a report of the given policies with n turns each, every
// policy at its own TTFT level so no two lines overlap.
func reportOf(policies []Policy, n int) Report {
	var r Report
	level := 3.0
	for _, p := range policies {
		turns := make([]TurnResult, n)
		for i := range turns {
			turns[i] = TurnResult{Turn: i + 1, HistoryTokens: 150 * (i + 1), TTFTMs: level * (1 + float64(i)/float64(2*n))}
		}
		r.Policies = append(r.Policies, PolicyResult{Policy: p, Turns: turns})
		level *= 4
	}
	return r
}

func TestWriteSVG(t *testing.T) {
	tests := []struct {
		name     string
		policies []Policy
		budget   int
	}{
		{"every policy", Policies(), 2048},
		{"one policy, no budget line", []Policy{Sink}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reportOf(tt.policies, 40)
			r.Policies[0].Turns[5].TTFTMs = 0 // cannot sit on a log axis: skipped
			var buf bytes.Buffer
			if err := WriteSVG(&buf, r, tt.budget); err != nil {
				t.Fatal(err)
			}
			els := parseSVG(t, buf.Bytes())
			lines := map[string]element{}
			legend := map[string]bool{}
			strokes := map[string]bool{}
			count := map[string]int{}
			for _, e := range els {
				switch {
				case e.name == "polyline":
					if _, dup := lines[e.attrs["data-policy"]]; dup {
						t.Fatalf("two polylines for %s", e.attrs["data-policy"])
					}
					lines[e.attrs["data-policy"]] = e
					strokes[e.attrs["stroke"]] = true
				case e.name == "text" && e.group != "":
					if e.text != e.group {
						t.Fatalf("legend entry %q in the group of %q", e.text, e.group)
					}
					legend[e.text] = true
				case e.name == "text":
					count[e.attrs["class"]]++
					if e.attrs["class"] == "title" || strings.HasSuffix(e.attrs["class"], "label") {
						count[e.attrs["class"]+":"+e.text]++
					}
				case e.name == "line" && e.attrs["class"] == "budget":
					count["budget"]++
				}
			}
			if len(lines) != len(tt.policies) || len(legend) != len(tt.policies) || len(strokes) != len(tt.policies) {
				t.Fatalf("%d polylines, %d legend entries, %d colours; want %d of each", len(lines), len(legend), len(strokes), len(tt.policies))
			}
			for i, p := range tt.policies {
				line, ok := lines[string(p)]
				if !ok || !legend[string(p)] {
					t.Fatalf("policy %s: polyline %v, legend %v", p, ok, legend[string(p)])
				}
				want := 40
				if i == 0 {
					want--
				}
				if got := len(strings.Fields(line.attrs["points"])); got != want {
					t.Fatalf("policy %s: %d points, want %d", p, got, want)
				}
			}
			if count["title"] != 1 || count["xlabel"] != 1 || count["ylabel"] != 1 || count["xtick"] < 4 || count["ytick"] < 3 {
				t.Fatalf("title, axis labels and ticks: %v", count)
			}
			if wantBudget := min(tt.budget, 1); count["budget"] != wantBudget {
				t.Fatalf("%d budget lines, want %d", count["budget"], wantBudget)
			}
		})
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{{0.5, "0.5"}, {20, "20"}, {1500, "1500"}, {10000, "10000"}, {0.1 + 0.2, "0.3"}}
	for _, tt := range tests {
		if got := tickLabel(tt.in); got != tt.want {
			t.Errorf("tickLabel(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
	xmax, ylo, yhi := bounds(reportOf([]Policy{Full}, 45), 2048)
	if xmax != 7000 || ylo != 1 || yhi != 10 {
		t.Fatalf("bounds: x to %v, y from %v to %v; want 7000, 1, 10", xmax, ylo, yhi)
	}
	if got := logTicks(1, 100); len(got) != 7 || got[6] != 100 {
		t.Fatalf("log ticks %v", got)
	}
}
