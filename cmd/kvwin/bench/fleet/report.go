package fleet

import (
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

	"kvwin/cmd/kvwin/bench/svgplot"
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

// tierHeader is fleet.csv's columns of the snapshot tiers, after
// csvHeader's, written only when some row has tiers (a file of rows
// without is as before them).
var tierHeader = []string{"tiers", "restores_ram", "restores_disk", "restored_tokens_ram", "restored_tokens_disk"}

// hasTiers reports whether some row ran with snapshot tiers.
func hasTiers(rows []Row) bool {
	return slices.ContainsFunc(rows, func(r Row) bool { return r.Tiers != "" })
}

// WriteCSV writes the rows with a header line.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	tiers := hasTiers(rows)
	header := csvHeader
	if tiers {
		header = slices.Concat(csvHeader, tierHeader)
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range rows {
		rec := []string{r.Policy, r.NodeKind, strconv.Itoa(r.Nodes), strconv.Itoa(r.Slots), f(r.Load), f(r.TTFTP50), f(r.TTFTP90),
			f(r.TTFTP99), f(r.QueueP50), f(r.QueueP90), strconv.Itoa(r.PrefillTokens), strconv.Itoa(r.OraclePrefill),
			f(r.PrefillVsOracle), f(r.HitRate), f(r.Throughput), strconv.Itoa(r.Turns), strconv.Itoa(r.Errors),
			f(r.ActivePerSlot), f(r.SimulatedSeconds), f(r.WallSeconds), f(r.ConversationsRate), strconv.FormatInt(r.CacheRAMMiB, 10)}
		if tiers {
			rec = append(rec, r.Tiers, strconv.Itoa(r.RestoresRAM), strconv.Itoa(r.RestoresDisk),
				strconv.Itoa(r.RestoredTokensRAM), strconv.Itoa(r.RestoredTokensDisk))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// PrintTable writes the rows as a table, each policy's prefill and TTFT
// p90 also as ratios: to the oracle's prefill, and to the best policy's
// TTFT p90 at that load and fleet (its nodes' tiers included). Rows with
// snapshot tiers add their restores from RAM and from disk.
func PrintTable(w io.Writer, rows []Row) {
	tiers := hasTiers(rows)
	fmt.Fprintf(w, "%-13s %-17s %5s %5s %5s %9s %9s %9s %9s %11s %11s %8s %6s %8s %9s %6s %6s", "policy", "kind", "nodes", "slots", "load",
		"ttft p50", "ttft p90", "ttft p99", "queue p90", "prefill", "oracle", "/oracle", "hit", "p90/best", "tok/s", "active", "errors")
	if tiers {
		fmt.Fprintf(w, " %-17s %8s %8s", "tiers", "rest ram", "rest disk")
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		best := math.Inf(1)
		for _, o := range rows {
			if o.Load == r.Load && o.Nodes == r.Nodes && o.NodeKind == r.NodeKind && o.CacheRAMMiB == r.CacheRAMMiB && o.Tiers == r.Tiers {
				best = min(best, o.TTFTP90)
			}
		}
		kind := r.NodeKind
		if r.CacheRAMMiB > 0 {
			kind += "+" + strconv.FormatInt(r.CacheRAMMiB, 10) + "MiB"
		}
		fmt.Fprintf(w, "%-13s %-17s %5d %5d %5.2f %7.0fms %7.0fms %7.0fms %7.0fms %11d %11d %7.2fx %5.1f%% %7.2fx %9.1f %6.2f %6d",
			r.Policy, kind, r.Nodes, r.Slots, r.Load, r.TTFTP50, r.TTFTP90, r.TTFTP99, r.QueueP90, r.PrefillTokens, r.OraclePrefill,
			r.PrefillVsOracle, 100*r.HitRate, r.TTFTP90/best, r.Throughput, r.ActivePerSlot, r.Errors)
		if tiers {
			fmt.Fprintf(w, " %-17s %8d %8d", cmp.Or(r.Tiers, "none"), r.RestoresRAM, r.RestoresDisk)
		}
		fmt.Fprintln(w)
	}
}

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
		tiers  string
	}
	var keys []key
	series := map[key][]Row{}
	xmax, ylo, yhi := 0.0, math.Inf(1), 0.0
	for _, r := range rows {
		k := key{r.Policy, r.Nodes, r.Tiers}
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
	p := svgplot.New(w, svgplot.Chart{Title: "TTFT p90 against offered load (simulated fleet)",
		XLabel: "offered load (share of the fleet's prefill capacity)", YLabel: "TTFT p90 (ms, log scale)", XMax: xmax, YLo: ylo, YHi: yhi})
	p.Open()
	for v := 0.0; v <= xmax+1e-9; v += 0.2 {
		x := p.X(v)
		p.GridX(x)
		p.Printf(`<text x="%.1f" y="%d" text-anchor="middle">%.1f</text>`+"\n", x, svgplot.Bottom+19, v)
	}
	for v := ylo; v <= yhi*1.001; v *= 10 {
		y := p.Y(v)
		p.GridY(y)
		p.Printf(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgplot.Left-8, y, strconv.FormatFloat(v, 'f', -1, 64))
	}
	p.Frame()
	spare := []string{"#7f7f7f", "#bcbd22", "#17becf"}
	for i, k := range keys {
		colour, ok := policyColours[k.policy]
		if !ok {
			colour = spare[i%len(spare)]
		}
		label, dash := k.policy, ""
		if hasTiers(rows) && k.tiers == "" {
			label += " (no tiers)"
			dash = ` stroke-dasharray="6 4"`
		}
		rs := slices.Clone(series[k])
		slices.SortFunc(rs, func(a, b Row) int { return cmp.Compare(a.Load, b.Load) })
		var pts []string
		for _, r := range rs {
			if r.TTFTP90 > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.X(r.Load), p.Y(r.TTFTP90)))
				p.Printf(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", p.X(r.Load), p.Y(r.TTFTP90), colour)
			}
		}
		p.Printf(`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", colour, dash, strings.Join(pts, " "))
		if len(keys) > len(policyColours) && !hasTiers(rows) || nodeCounts(rows) > 1 {
			label = fmt.Sprintf("%s (%d nodes)", label, k.nodes)
		}
		y := svgplot.Top + 10 + 20*i
		p.Printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", svgplot.LegendLeft, y, svgplot.LegendLeft+24, y, colour, dash)
		p.Printf(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", svgplot.LegendLeft+30, y, label)
	}
	return p.Close()
}

func nodeCounts(rows []Row) int {
	seen := map[int]bool{}
	for _, r := range rows {
		seen[r.Nodes] = true
	}
	return len(seen)
}
