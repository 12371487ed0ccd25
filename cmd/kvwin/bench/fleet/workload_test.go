package fleet

import (
	"bytes"
	"encoding/csv"
	"slices"
	"strings"
	"testing"
	"time"
)

// Requests sharing hash ids share those blocks token for token and
// diverge after; a line that is not a trace record is refused.
func TestMooncakeTraceSharesPrefixesByHashID(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 500, "input_length": 700, "output_length": 5, "hash_ids": [1, 4]}
`
	convs, err := ReadMooncake(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	if len(convs) != 2 || len(convs[0].prompt(0)) != 1100 || len(convs[1].answer(0)) != 5 || convs[1].start.Milliseconds() != 500 {
		t.Fatalf("parsed %d requests: %d prompt tokens, %d answer tokens, start %v", len(convs), len(convs[0].prompt(0)), len(convs[1].answer(0)), convs[1].start)
	}
	if got := lcp(convs[0].prompt(0), convs[1].prompt(0)); got < MooncakeBlockTokens || got >= 2*MooncakeBlockTokens {
		t.Fatalf("shared prefix %d tokens, want the one shared 512-token block", got)
	}
	for _, bad := range []string{`{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`, `not json`} {
		if _, err := ReadMooncake(strings.NewReader(bad)); err == nil {
			t.Errorf("trace %q accepted", bad)
		}
	}
}

// A trace's slots hold its longest request (prompt and answer), rounded
// up to a power of two, never less than asked; TraceOver counts what a
// given context cannot hold.
func TestTraceContextHoldsTheLongestRequest(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 9000, "output_length": 500, "hash_ids": [1]}
{"timestamp": 1, "input_length": 3000, "output_length": 96, "hash_ids": [1]}
`
	convs, err := ReadMooncake(strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ least, want int }{{4096, 16384}, {32768, 32768}, {0, 16384}} {
		if got := TraceContext(convs, tc.least); got != tc.want {
			t.Errorf("TraceContext(least %d) = %d, want %d", tc.least, got, tc.want)
		}
	}
	for _, tc := range []struct{ ctx, want int }{{4096, 1}, {3096, 1}, {3095, 2}, {9500, 0}} {
		if got := TraceOver(convs, tc.ctx); got != tc.want {
			t.Errorf("TraceOver(%d) = %d, want %d", tc.ctx, got, tc.want)
		}
	}
}

// The oracle reuses each conversation's history and each group's system
// prompt once: two conversations of one group, two turns each. What a
// turn leaves held is its prompt and its answer but the answer's end
// token, sampled last and never computed into KV.
func TestOracleCountsWhatNoEarlierTurnSent(t *testing.T) {
	w := Workload{Conversations: 2, Groups: 1, SystemTokens: 1000, Think: 1, Context: 4096, Seed: 7}
	convs, err := w.generate()
	if err != nil {
		t.Fatal(err)
	}
	var turns []*turnRecord
	want := 1000
	for ci, c := range convs {
		for ti := range c.turns() {
			turns = append(turns, &turnRecord{conv: c, ci: ci, index: ti})
			prev := 1000
			if ti > 0 {
				prev = c.answerEnd[ti-1] - 1
			} else if ci == 0 {
				prev = 0
			}
			want += c.promptEnd[ti] - prev
		}
	}
	want -= 1000 // the first turn counted the system prompt already, as prev 0
	if got := oracle(turns); got != want {
		t.Fatalf("oracle %d, want %d", got, want)
	}
}

// fleet.csv has a header and a row per run; fleet.svg a line per policy.
func TestReportFilesHoldEveryRow(t *testing.T) {
	rows := []Row{{Policy: "prefix", Load: 0.2, TTFTP90: 100}, {Policy: "prefix", Load: 0.6, TTFTP90: 300},
		{Policy: "dynamo", Load: 0.2, TTFTP90: 900}, {Policy: "dynamo", Load: 0.6, TTFTP90: 1200}}
	var c, s bytes.Buffer
	if err := WriteCSV(&c, rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&c).ReadAll()
	if err != nil || len(recs) != 5 || recs[0][6] != "ttft_p90_ms" || recs[3][0] != "dynamo" {
		t.Fatalf("csv: %v %v", recs, err)
	}
	if err := WriteSVG(&s, rows); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(s.String(), "<polyline"); n != 2 || !strings.Contains(s.String(), ">dynamo<") {
		t.Fatalf("svg: %d lines", n)
	}
}

// --regenerate sends a share of the turns again, right after their
// answer: the same prompt, then the conversation goes on as it would
// have; the conversations are otherwise those drawn without it, and the
// oracle computes nothing for a repeat.
func TestRegenerateRepeatsTurnsOfTheSameConversations(t *testing.T) {
	w := DefaultWorkload()
	w.Conversations = 200
	plain, err := w.generate()
	if err != nil {
		t.Fatal(err)
	}
	w.Regenerate = 0.2
	again, err := w.generate()
	if err != nil {
		t.Fatal(err)
	}
	turns, repeats := 0, 0
	var waited time.Duration
	var records []*turnRecord
	for i, c := range again {
		p := plain[i]
		if !slices.Equal(c.stream, p.stream) || len(c.think) != c.turns() {
			t.Fatalf("conversation %d: another stream, or %d think times for %d turns", i, len(c.think), c.turns())
		}
		k := 0 // the turn of p that turn ti of c sends
		for ti := range c.turns() {
			records = append(records, &turnRecord{conv: c, ci: i, index: ti})
			turns++
			if ti > 0 && c.promptEnd[ti] == c.promptEnd[ti-1] {
				repeats++
				waited += c.think[ti-1]
				continue
			}
			if c.promptEnd[ti] != p.promptEnd[k] || c.answerEnd[ti] != p.answerEnd[k] {
				t.Fatalf("conversation %d turn %d is not turn %d of the plain workload", i, ti, k)
			}
			k++
		}
		if k != p.turns() {
			t.Fatalf("conversation %d: %d of its %d turns sent", i, k, p.turns())
		}
	}
	if share := float64(repeats) / float64(turns-repeats); share < 0.1 || share > 0.3 {
		t.Errorf("%d repeats of %d turns (%.2f), want about 0.2", repeats, turns-repeats, share)
	}
	if mean := waited / time.Duration(max(repeats, 1)); mean > w.Think/3 {
		t.Errorf("repeats sent %v after their answer on average, want about %v", mean, w.Think/6)
	}
	var plainRecords []*turnRecord
	for i, c := range plain {
		for ti := range c.turns() {
			plainRecords = append(plainRecords, &turnRecord{conv: c, ci: i, index: ti})
		}
	}
	if a, b := oracle(records), oracle(plainRecords); a != b {
		t.Errorf("oracle %d with repeats, %d without", a, b)
	}
}

// oracle returns the oracle's prefill of turns (failed turns count for
// nothing: they leave nothing to reuse).
func oracle(turns []*turnRecord) int { return oracleTotal(oracleTurns(turns)) }
