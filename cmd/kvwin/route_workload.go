package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"

	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// routeWorkload is llm-d's benchmark shape scaled to one machine: groups of
// conversations sharing a long system prompt, each conversation growing over
// its turns, turns issued in a seeded random order with bounded concurrency.
type routeWorkload struct {
	Groups, PerGroup, Turns int
	SystemBytes, UserBytes  int // the test model tokenizes a byte to a token
	AnswerBytes             int // the workload's assistant messages
	Concurrency             int
	MaxTokens               int
	Seed                    uint64
}

func defaultRouteWorkload() routeWorkload {
	return routeWorkload{Groups: 3, PerGroup: 4, Turns: 6, SystemBytes: 1000, UserBytes: 380, AnswerBytes: 60,
		Concurrency: 2, MaxTokens: 16, Seed: 1}
}

// routeTurn is what one request observed.
type routeTurn struct {
	Conv, Turn     int
	Backend        string
	Prompt, Cached int
	TTFT           time.Duration
	Err            error
}

// routeResult sums one policy's run.
type routeResult struct {
	Policy        string      `json:"policy"`
	CachedShare   float64     `json:"cached_share"`
	PrefillTokens int         `json:"prefill_tokens"`
	TTFTP50       float64     `json:"ttft_p50_ms"`
	TTFTP90       float64     `json:"ttft_p90_ms"`
	RequestsPerS  float64     `json:"requests_per_s"`
	Requests      int         `json:"-"`
	Errors        int         `json:"-"`
	Turns         []routeTurn `json:"-"`
}

func wordText(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	words := []string{"kv", "cache", "prefix", "slot", "turn", "window", "route", "node", "token", "block", "memory", "sink"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// messages returns conversation c's messages for its turn t (1-based).
func (w routeWorkload) messages(c, t int) []map[string]string {
	group := c / w.PerGroup
	out := []map[string]string{{"role": "system", "content": wordText(uint64(1000+group)+w.Seed*7919, w.SystemBytes)}}
	for i := 1; i <= t; i++ {
		out = append(out, map[string]string{"role": "user", "content": fmt.Sprintf("[%d.%d] %s", c, i, wordText(uint64(c*100+i)+w.Seed*104729, w.UserBytes))})
		if i < t {
			out = append(out, map[string]string{"role": "assistant", "content": wordText(uint64(c*100+i)+w.Seed*7, w.AnswerBytes)})
		}
	}
	return out
}

// run replays the workload against a base URL and sums it up.
func (w routeWorkload) run(ctx context.Context, url, policy string, progress func(routeTurn)) routeResult {
	convs := w.Groups * w.PerGroup
	next := make([]int, convs) // the next turn of each conversation, 1-based; 0 = not started
	busy := make([]bool, convs)
	for i := range next {
		next[i] = 1
	}
	rng := rand.New(rand.NewPCG(w.Seed, 42))
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	remaining := convs * w.Turns
	// pick waits for a conversation whose next turn may go now (its
	// previous turn answered) and takes one at random; false when all
	// turns are done.
	pick := func() (int, int, bool) {
		mu.Lock()
		defer mu.Unlock()
		for {
			var ready []int
			for c := range convs {
				if !busy[c] && next[c] <= w.Turns {
					ready = append(ready, c)
				}
			}
			if len(ready) > 0 {
				c := ready[rng.IntN(len(ready))]
				busy[c] = true
				return c, next[c], true
			}
			if remaining == 0 || ctx.Err() != nil {
				return 0, 0, false
			}
			cond.Wait()
		}
	}
	var turns []routeTurn
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range w.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, t, ok := pick()
				if !ok {
					return
				}
				tr := w.turn(ctx, url, c, t)
				mu.Lock()
				busy[c] = false
				next[c]++
				remaining--
				turns = append(turns, tr)
				cond.Broadcast()
				mu.Unlock()
				if progress != nil {
					progress(tr)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	<-done
	return summarize(policy, turns, time.Since(start))
}

// turn sends one streamed chat request and reads it to the end.
func (w routeWorkload) turn(ctx context.Context, url string, c, t int) routeTurn {
	tr := routeTurn{Conv: c, Turn: t}
	body, _ := json.Marshal(map[string]any{"messages": w.messages(c, t), "max_tokens": w.MaxTokens,
		"temperature": 0, "stream": true, "ignore_eos": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		tr.Err = err
		return tr
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tr.Err = err
		return tr
	}
	defer resp.Body.Close()
	tr.Backend = resp.Header.Get("X-Kvwin-Backend")
	tr.Prompt, _ = strconv.Atoi(resp.Header.Get("X-Kvwin-Prompt-Tokens"))
	tr.Cached, _ = strconv.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
	if resp.StatusCode != http.StatusOK {
		tr.Err = fmt.Errorf("status %d", resp.StatusCode)
		return tr
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if tr.TTFT == 0 {
			tr.TTFT = time.Since(sent)
		}
		if strings.Contains(line, `"error"`) {
			tr.Err = fmt.Errorf("in-stream error: %s", line)
		}
	}
	return tr
}

func summarize(policy string, turns []routeTurn, wall time.Duration) routeResult {
	r := routeResult{Policy: policy, Turns: turns}
	var prompt, cached int
	var ttft []float64
	for _, t := range turns {
		r.Requests++
		if t.Err != nil {
			r.Errors++
			continue
		}
		prompt += t.Prompt
		cached += t.Cached
		r.PrefillTokens += t.Prompt - t.Cached
		ttft = append(ttft, float64(t.TTFT.Microseconds())/1000)
	}
	if prompt > 0 {
		r.CachedShare = float64(cached) / float64(prompt)
	}
	sort.Float64s(ttft)
	r.TTFTP50, r.TTFTP90 = percentile(ttft, 0.5), percentile(ttft, 0.9)
	r.RequestsPerS = float64(r.Requests-r.Errors) / wall.Seconds()
	return r
}

// percentile of sorted values (nearest rank).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
