package attention

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// testdata/ttft_run.json is the unedited ttft.json of one run of
//
//	kvwin bench ttft --turns 120 --policies full-nocache,full,sliding,sink,memory
//
// on the default test model (2 layers, width 128), one compute thread, on
// a quiet two-core machine: 506 prompts of every policy, from cold 6,800-token
// prefills to 40-token suffixes after a 6,000-token cached prefix.
func loadRun(t *testing.T) (even, odd []Observation) {
	t.Helper()
	b, err := os.ReadFile("testdata/ttft_run.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policies []struct {
			Policy string `json:"policy"`
			Turns  []struct {
				Turn     int     `json:"turn"`
				New      int     `json:"new_tokens"`
				Cached   int     `json:"cached_tokens"`
				PromptMs float64 `json:"prompt_ms"`
			} `json:"turns"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Policies {
		for _, tu := range p.Turns {
			if tu.Turn == 1 || tu.PromptMs <= 0 { // turn 1 pays the server's warm-up
				continue
			}
			o := Observation{New: tu.New, Context: tu.Cached, Elapsed: time.Duration(tu.PromptMs * float64(time.Millisecond))}
			if tu.Turn%2 == 0 {
				even = append(even, o)
			} else {
				odd = append(odd, o)
			}
		}
	}
	return even, odd
}

// The cost model calibrated on half the turns of a run predicts the other
// half's prompt times within 25% (mean absolute percentage error), both ways.
func TestCalibrationPredictsTheOtherHalfOfARecordedRun(t *testing.T) {
	even, odd := loadRun(t)
	if len(even) < 200 || len(odd) < 200 {
		t.Fatalf("recorded run has %d + %d observations", len(even), len(odd))
	}
	for _, split := range []struct {
		name         string
		train, check []Observation
	}{{"fit on even turns", even, odd}, {"fit on odd turns", odd, even}} {
		t.Run(split.name, func(t *testing.T) {
			k, err := Fit(split.train)
			if err != nil {
				t.Fatal(err)
			}
			if e := MAPE(k, split.check); e > 0.25 {
				t.Fatalf("held-out error %.1f%% with %+v, want ≤ 25%%", 100*e, k)
			} else {
				t.Logf("held-out error %.1f%%: c0 %.2f ms, a %.1f µs/token, b %.1f ns/token²", 100*e, 1e3*k.C0, 1e6*k.A, 1e9*k.B)
			}
			// The online calibration the router uses gets there too.
			cal, err := NewCalibration(CalibrationConfig{Prior: Coefficients{A: 1.0 / 2000}, HalfLife: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range split.train {
				if err := cal.Observe(o); err != nil {
					t.Fatal(err)
				}
			}
			if e := MAPE(cal, split.check); e > 0.25 {
				t.Fatalf("online calibration: held-out error %.1f%%", 100*e)
			}
		})
	}
}
