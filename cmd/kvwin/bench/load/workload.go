package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"kvwin/cmd/kvwin/bench/chat"
	"kvwin/cmd/kvwin/bench/stats"
)

// Workload is N streaming chat clients against one server for a
// duration: each client holds a conversation of a few turns (so prefixes
// are reused as in real use), sends a turn, reads its stream to the end,
// and sends the next at once. A 429 is waited out (Retry-After, at most
// a second) before the client tries again, as a well-behaved client does.
type Workload struct {
	Clients     int
	Duration    time.Duration
	MaxTokens   int // tokens per answer (a grammar keeps them printable)
	UserBytes   int // bytes of each user message
	SystemBytes int // bytes of each conversation's system prompt
	Turns       int // turns before a client starts a new conversation
}

func DefaultWorkload() Workload {
	return Workload{Clients: 16, Duration: 60 * time.Second, MaxTokens: 32, UserBytes: 120, SystemBytes: 400, Turns: 6}
}

// Outcomes of a request other than an HTTP status.
const (
	outcomeStreamError    = "stream_error"    // 200, then an error event or a cut stream
	outcomeTransportError = "transport_error" // no response: refused, reset
)

// Result is what a load run measured.
type Result struct {
	Target    string         `json:"target"`
	Clients   int            `json:"clients"`
	DurationS float64        `json:"duration_s"`
	Requests  int            `json:"requests"`
	ByStatus  map[string]int `json:"responses_by_status"` // "200", "429", …, stream_error, transport_error
	// ErrorsNot429 counts every request that did not end in a complete
	// 200 stream, except 429s (the server's way of saying "later").
	ErrorsNot429     int      `json:"errors_not_429"`
	TTFTP50          float64  `json:"ttft_p50_ms"`
	TTFTP99          float64  `json:"ttft_p99_ms"`
	CompletedPerS    float64  `json:"completed_per_s"`
	GoroutinesBefore float64  `json:"goroutines_before"`
	GoroutinesAfter  float64  `json:"goroutines_after"`
	RSSBefore        float64  `json:"rss_bytes_before"`
	RSSAfter         float64  `json:"rss_bytes_after"`
	FirstErrors      []string `json:"first_errors,omitempty"` // up to 5, to say what went wrong
}

// loadOutcome is one request.
type loadOutcome struct {
	outcome string // an HTTP status, or one of the outcome constants
	ttft    time.Duration
	err     string
	tokens  int // generated, as the stream's usage said (mixed loads)
}

// Run drives the clients until the duration passes or ctx ends, then waits
// for their last requests to finish.
func (w Workload) Run(ctx context.Context, target string) Result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: w.Clients, MaxConnsPerHost: 0}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(w.Duration)
	var (
		mu       sync.Mutex
		outcomes []loadOutcome
		wg       sync.WaitGroup
	)
	start := time.Now()
	for c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var history []map[string]string
			for turn := 0; time.Now().Before(deadline) && ctx.Err() == nil; turn++ {
				if turn%w.Turns == 0 {
					history = []map[string]string{{"role": "system", "content": chat.Words(uint64(1000+c*31+turn), w.SystemBytes)}}
				}
				msgs := append(history, map[string]string{"role": "user", "content": chat.Words(uint64(c*7919+turn), w.UserBytes)})
				o, answer, wait := w.request(ctx, client, target, msgs)
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				if o.outcome == "200" {
					history = append(msgs, map[string]string{"role": "assistant", "content": answer})
				}
				if wait > 0 {
					pause(ctx, wait)
				}
			}
		}()
	}
	wg.Wait()
	return summarizeLoad(target, w.Clients, outcomes, time.Since(start))
}

// request sends one streamed turn and reads it to the end. wait is how
// long to wait before the next (after a 429).
func (w Workload) request(ctx context.Context, client *http.Client, target string, msgs []map[string]string) (o loadOutcome, answer string, wait time.Duration) {
	return send(ctx, client, target, msgs, w.MaxTokens, nil)
}

// send sends one streamed turn of maxTokens (a grammar makes the answer
// that long) with header and reads it to the end. With a header the
// stream's usage is asked for, and o.tokens counts the tokens generated.
func send(ctx context.Context, client *http.Client, target string, msgs []map[string]string, maxTokens int, header http.Header) (o loadOutcome, answer string, wait time.Duration) {
	fields := map[string]any{"messages": msgs, "max_tokens": maxTokens + 8, "stream": true,
		"temperature": 0, "grammar": fmt.Sprintf("root ::= [a-z ]{%d}", maxTokens)}
	if header != nil {
		fields["stream_options"] = map[string]bool{"include_usage": true}
	}
	body, _ := json.Marshal(fields)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return loadOutcome{outcome: outcomeTransportError, err: err.Error()}, "", 0
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return loadOutcome{outcome: outcomeTransportError, err: err.Error()}, "", 100 * time.Millisecond
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o := loadOutcome{outcome: strconv.Itoa(resp.StatusCode), err: strings.TrimSpace(string(msg))}
		if resp.StatusCode == http.StatusTooManyRequests {
			wait = time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				wait = min(wait, time.Duration(s)*time.Second)
			}
			wait = max(wait, 50*time.Millisecond)
		}
		return o, "", wait
	}
	o.outcome = "200"
	st, err := chat.ReadStream(resp.Body, sent)
	var inStream *chat.StreamError
	switch {
	case errors.As(err, &inStream):
		return loadOutcome{outcome: outcomeStreamError, err: inStream.Data}, "", 0
	case !st.Done:
		why := "the stream ended without [DONE]"
		if err != nil && !errors.Is(err, context.Canceled) {
			why = err.Error()
		}
		return loadOutcome{outcome: outcomeStreamError, err: why}, "", 0
	}
	o.ttft, o.tokens = st.TTFT, st.CompletionTokens
	return o, st.Text, 0
}

func summarizeLoad(target string, clients int, outcomes []loadOutcome, wall time.Duration) Result {
	r := Result{Target: target, Clients: clients, DurationS: wall.Seconds(), Requests: len(outcomes), ByStatus: map[string]int{}}
	var ttft []float64
	for _, o := range outcomes {
		r.ByStatus[o.outcome]++
		switch o.outcome {
		case "200":
			ttft = append(ttft, float64(o.ttft.Microseconds())/1000)
		case "429":
		default:
			noteError(&r.ErrorsNot429, &r.FirstErrors, o.outcome+": "+o.err)
		}
	}
	r.TTFTP50, r.TTFTP99 = quantiles(ttft)
	r.CompletedPerS = float64(len(ttft)) / wall.Seconds()
	return r
}

// quantiles is the p50 and p99 of ttft (ms); 0 for none, not
// stats.Quantile's NaN, which JSON cannot hold.
func quantiles(ttft []float64) (p50, p99 float64) {
	if len(ttft) == 0 {
		return 0, 0
	}
	return stats.Quantile(ttft, 0.5), stats.Quantile(ttft, 0.99)
}

// noteError counts an error other than 429 in n and keeps msg among the
// first five, to say what went wrong.
func noteError(n *int, first *[]string, msg string) {
	*n++
	if len(*first) < 5 {
		*first = append(*first, msg)
	}
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// processStats reads the goroutines and resident memory a kvwin server
// reports in /metrics (the Go and process collectors).
func processStats(ctx context.Context, target string) (goroutines, rss float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "go_goroutines":
			dst = &goroutines
		case "process_resident_memory_bytes":
			dst = &rss
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
			return 0, 0, fmt.Errorf("/metrics: %s: %w", name, err)
		}
		found++
	}
	if found < 2 {
		return 0, 0, errors.New("/metrics has no go_goroutines or process_resident_memory_bytes")
	}
	return goroutines, rss, sc.Err()
}
