package app_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// scrape returns /metrics as text.
func scrape(t *testing.T, a *app.App) string {
	t.Helper()
	resp, err := http.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// sample reads the value of the sample whose name and labels match
// (a regexp over the line before the value); -1 if absent.
func sample(text, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + series + ` ([0-9.e+-]+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestLatencyHistogramsObserveEveryGeneration: one streamed and one
// non-streamed chat each land in the TTFT, duration and prompt histograms
// under their model and backend; the prompt counter adds up to the
// X-Kvwin-Prompt-Tokens the client saw.
func TestLatencyHistogramsObserveEveryGeneration(t *testing.T) {
	a := apptest.Start(t, nil)
	labels := `\{backend="embedded",model="kvwin-tiny"\}`
	if v := sample(scrape(t, a), "kvwin_time_to_first_token_seconds_count"+labels); v > 0 {
		t.Fatalf("observations before any request: %v", v)
	}
	t1 := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(1, 100)), "max_tokens": 4, "stream": true})
	t2 := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(2, 60)), "max_tokens": 4})
	if t1.Status != 200 || t2.Status != 200 || t1.Prompt == 0 || t2.Prompt == 0 {
		t.Fatalf("turns: %d (%d tokens), %d (%d tokens)", t1.Status, t1.Prompt, t2.Status, t2.Prompt)
	}
	text := scrape(t, a)
	for _, h := range []string{"kvwin_time_to_first_token_seconds", "kvwin_request_duration_seconds", "kvwin_prompt_tokens"} {
		if v := sample(text, h+"_count"+labels); v != 2 {
			t.Errorf("%s_count = %v, want 2", h, v)
		}
	}
	if v := sample(text, "kvwin_prompt_tokens_sum"+labels); v != float64(t1.Prompt+t2.Prompt) {
		t.Errorf("kvwin_prompt_tokens_sum = %v, want %d", v, t1.Prompt+t2.Prompt)
	}
	if v := sample(text, "kvwin_prompt_tokens_total"+labels); v != float64(t1.Prompt+t2.Prompt) {
		t.Errorf("kvwin_prompt_tokens_total = %v, want %d", v, t1.Prompt+t2.Prompt)
	}
	if v := sample(text, `kvwin_http_responses_total\{route="/v1/chat/completions",status="200"\}`); v != 2 {
		t.Errorf("responses 200 = %v, want 2", v)
	}
	ttft := sample(text, "kvwin_time_to_first_token_seconds_sum"+labels)
	dur := sample(text, "kvwin_request_duration_seconds_sum"+labels)
	if ttft <= 0 || ttft > dur {
		t.Errorf("ttft sum %v, duration sum %v: want 0 < ttft <= duration", ttft, dur)
	}
}

// TestGatewayCountsRoutingDecisions: a gateway reports each routed turn
// and exposes it to the dashboard.
func TestGatewayCountsRoutingDecisions(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 2, "round-robin")
	for i := range 3 {
		if turn := apptest.Post(t, gw, map[string]any{"messages": apptest.Msgs("user", apptest.Words(i, 30)), "max_tokens": 2}); turn.Status != 200 {
			t.Fatalf("turn %d: %d %s", i, turn.Status, turn.Body)
		}
	}
	text := scrape(t, gw)
	total := 0.0
	for _, n := range nodes {
		name := regexp.QuoteMeta(n.Addr())
		re := regexp.MustCompile(`(?m)^kvwin_router_decisions_total\{chosen="[^"]*` + name + `[^"]*",first="[^"]*"\} (\d+)$`)
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			total += v
		}
	}
	if total != 3 {
		t.Fatalf("decisions counted %v, want 3:\n%s", total, regexp.MustCompile(`(?m)^kvwin_router.*$`).FindAllString(text, -1))
	}
	var st app.Status
	getJSON(t, gw.URL()+"/kvwin/v1/status", &st)
	if len(st.Routing) != 3 || len(st.Backends) != 2 || st.Routing[2].Chosen == "" {
		t.Fatalf("status: %d decisions, %d backends: %+v", len(st.Routing), len(st.Backends), st)
	}
}
