package fleet

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// WriteFiles writes fleet.json, fleet.csv and fleet.svg into dir.
func WriteFiles(dir string, rows []Row) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer, []Row) error{"fleet.json": WriteJSON, "fleet.csv": WriteCSV, "fleet.svg": WriteSVG} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = write(f, rows)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// WriteJSON writes the rows as one JSON array.
func WriteJSON(w io.Writer, rows []Row) error {
	if rows == nil {
		rows = []Row{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// csvHeader is fleet.csv's columns, the JSON names.
var csvHeader = []string{"policy", "node_kind", "nodes", "slots", "load", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
	"queue_p50_ms", "queue_p90_ms", "prefill_tokens", "oracle_prefill_tokens", "prefill_vs_oracle", "hit_rate",
	"throughput_tokens_per_s", "turns", "errors", "active_per_slot", "simulated_s", "wall_s", "conversations_per_s", "cache_ram_mib"}

// WriteCSV writes the rows with a header line.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range rows {
		rec := []string{r.Policy, r.NodeKind, strconv.Itoa(r.Nodes), strconv.Itoa(r.Slots), f(r.Load), f(r.TTFTP50), f(r.TTFTP90),
			f(r.TTFTP99), f(r.QueueP50), f(r.QueueP90), strconv.Itoa(r.PrefillTokens), strconv.Itoa(r.OraclePrefill),
			f(r.PrefillVsOracle), f(r.HitRate), f(r.Throughput), strconv.Itoa(r.Turns), strconv.Itoa(r.Errors),
			f(r.ActivePerSlot), f(r.SimulatedSeconds), f(r.WallSeconds), f(r.ConversationsRate), strconv.FormatInt(r.CacheRAMMiB, 10)}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// PrintTable writes the rows as a table, each policy's prefill and TTFT
// p90 also as ratios: to the oracle's prefill, and to the best policy's
// TTFT p90 at that load and fleet.
func PrintTable(w io.Writer, rows []Row) {
	fmt.Fprintf(w, "%-13s %-17s %5s %5s %5s %9s %9s %9s %9s %11s %11s %8s %6s %8s %9s %6s %6s\n", "policy", "kind", "nodes", "slots", "load",
		"ttft p50", "ttft p90", "ttft p99", "queue p90", "prefill", "oracle", "/oracle", "hit", "p90/best", "tok/s", "active", "errors")
	for _, r := range rows {
		best := math.Inf(1)
		for _, o := range rows {
			if o.Load == r.Load && o.Nodes == r.Nodes && o.NodeKind == r.NodeKind && o.CacheRAMMiB == r.CacheRAMMiB {
				best = min(best, o.TTFTP90)
			}
		}
		kind := r.NodeKind
		if r.CacheRAMMiB > 0 {
			kind += "+" + strconv.FormatInt(r.CacheRAMMiB, 10) + "MiB"
		}
		fmt.Fprintf(w, "%-13s %-17s %5d %5d %5.2f %7.0fms %7.0fms %7.0fms %7.0fms %11d %11d %7.2fx %5.1f%% %7.2fx %9.1f %6.2f %6d\n",
			r.Policy, kind, r.Nodes, r.Slots, r.Load, r.TTFTP50, r.TTFTP90, r.TTFTP99, r.QueueP90, r.PrefillTokens, r.OraclePrefill,
			r.PrefillVsOracle, 100*r.HitRate, r.TTFTP90/best, r.Throughput, r.ActivePerSlot, r.Errors)
	}
}

// The chart's geometry, as bench ttft's (cmd/kvwin/bench/ttft/svg.go).
const (
	svgWidth, svgHeight = 960, 560
	plotLeft, plotRight = 84, 748
	plotTop, plotBottom = 56, 492
	legendLeft          = 772
)

// policyColours are fixed per policy so charts of different runs read
// alike (Tableau 10).
var policyColours = map[string]string{
	"prefix": "#1f77b4", "round-robin": "#ff7f0e", "least-loaded": "#2ca02c", "random": "#d62728",
	"llm-d": "#9467bd", "llm-d-sticky": "#17becf", "sglang": "#8c564b", "dynamo": "#e377c2",
}

// WriteSVG draws TTFT p90 (log scale) against offered load, one line per
// policy (and node count, when the rows hold several), with a legend. Plain
// SVG 1.1, no scripts or external resources.
func WriteSVG(w io.Writer, rows []Row) error {
	type key struct {
		policy string
		nodes  int
	}
	var keys []key
	series := map[key][]Row{}
	xmax, ylo, yhi := 0.0, math.Inf(1), 0.0
	for _, r := range rows {
		k := key{r.Policy, r.Nodes}
		if _, ok := series[k]; !ok {
			keys = append(keys, k)
		}
		series[k] = append(series[k], r)
		xmax = max(xmax, r.Load)
		if r.TTFTP90 > 0 {
			ylo, yhi = min(ylo, r.TTFTP90), max(yhi, r.TTFTP90)
		}
	}
	if len(keys) == 0 || yhi == 0 {
		ylo, yhi, xmax = 1, 10, 1
	}
	ylo, yhi = math.Pow(10, math.Floor(math.Log10(ylo))), math.Pow(10, math.Ceil(math.Log10(yhi*1.01)))
	xmax = math.Ceil(xmax*10+0.5) / 10
	xs := func(v float64) float64 { return plotLeft + v/xmax*(plotRight-plotLeft) }
	ys := func(v float64) float64 {
		return plotBottom - (math.Log10(v)-math.Log10(ylo))/(math.Log10(yhi)-math.Log10(ylo))*(plotBottom-plotTop)
	}
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	p(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, svgHeight)
	p(`<text x="%d" y="30" text-anchor="middle" font-size="16" font-weight="bold">TTFT p90 against offered load (simulated fleet)</text>`+"\n",
		(plotLeft+plotRight)/2)
	for v := 0.0; v <= xmax+1e-9; v += 0.2 {
		x := xs(v)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e6e6e6"/>`+"\n", x, plotTop, x, plotBottom)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>`+"\n", x, plotBottom+19, v)
	}
	for v := ylo; v <= yhi*1.001; v *= 10 {
		y := ys(v)
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e6e6e6"/>`+"\n", plotLeft, y, plotRight, y)
		p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", plotLeft-8, y, strconv.FormatFloat(v, 'f', -1, 64))
	}
	p(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>`+"\n", plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop)
	p(`<text x="%d" y="%d" text-anchor="middle">offered load (share of the fleet's prefill capacity)</text>`+"\n", (plotLeft+plotRight)/2, plotBottom+44)
	p(`<text transform="translate(24 %d) rotate(-90)" text-anchor="middle">TTFT p90 (ms, log scale)</text>`+"\n", (plotTop+plotBottom)/2)
	spare := []string{"#7f7f7f", "#bcbd22", "#17becf"}
	for i, k := range keys {
		colour, ok := policyColours[k.policy]
		if !ok {
			colour = spare[i%len(spare)]
		}
		rs := slices.Clone(series[k])
		slices.SortFunc(rs, func(a, b Row) int { return cmp.Compare(a.Load, b.Load) })
		var pts []string
		for _, r := range rs {
			if r.TTFTP90 > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs(r.Load), ys(r.TTFTP90)))
				p(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", xs(r.Load), ys(r.TTFTP90), colour)
			}
		}
		p(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		label := k.policy
		if len(keys) > len(policyColours) || nodeCounts(rows) > 1 {
			label = fmt.Sprintf("%s (%d nodes)", k.policy, k.nodes)
		}
		y := plotTop + 10 + 20*i
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", legendLeft, y, legendLeft+24, y, colour)
		p(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", legendLeft+30, y, label)
	}
	p("</svg>\n")
	return b.Flush()
}

func nodeCounts(rows []Row) int {
	seen := map[int]bool{}
	for _, r := range rows {
		seen[r.Nodes] = true
	}
	return len(seen)
}
