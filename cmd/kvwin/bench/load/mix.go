package load

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"sort"
	"sync"
	"time"

	"kvwin/cmd/kvwin/bench/chat"
)

// Group is what one tenant's, or one class's, requests of a mixed load
// measured.
type Group struct {
	Name     string `json:"name"`            // the tenant, or the class
	Class    string `json:"class,omitempty"` // a tenant's class
	Requests int    `json:"requests"`
	// Completed counts complete 200 streams; CompletedTokens the tokens
	// they generated (their usage).
	Completed       int            `json:"completed"`
	CompletedTokens int            `json:"completed_tokens"`
	ByStatus        map[string]int `json:"responses_by_status"`
	TTFTP50         float64        `json:"ttft_p50_ms"`
	TTFTP99         float64        `json:"ttft_p99_ms"`
}

// tenantOutcome is one request of a mixed load and whose it was.
type tenantOutcome struct {
	loadOutcome
	tenant int // index into the run's tenants
}

// runMix runs every tenant's load at once against target and returns its
// requests, when the finite loads (burst, serial) ended and the floods'
// duration passed. Conversations are numbered from seeds.
func (w Workload) runMix(ctx context.Context, target string, tenants []Tenant, seeds int) ([]tenantOutcome, time.Duration) {
	clients := 0
	for _, t := range tenants {
		clients += max(t.Clients, t.Requests)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	var (
		mu       sync.Mutex
		outcomes []tenantOutcome
		wg       sync.WaitGroup
	)
	record := func(i int, o loadOutcome) {
		mu.Lock()
		outcomes = append(outcomes, tenantOutcome{o, i})
		mu.Unlock()
	}
	start := time.Now()
	deadline := start.Add(w.Duration)
	var sent sync.WaitGroup // the bursts' requests not yet written
	for _, t := range tenants {
		if t.Mode == ModeBurst {
			sent.Add(t.Requests)
		}
	}
	for i, t := range tenants {
		header := http.Header{"X-Kvwin-Priority": {t.Class.String()}}
		if t.Key != "" {
			header.Set("Authorization", "Bearer "+t.Key)
		}
		// one sends the tenant's request n, waiting out 429s (each is
		// counted) until it is answered otherwise.
		one := func(ctx context.Context, n int) {
			n += seeds
			msgs := []map[string]string{
				{"role": "system", "content": chat.Words(uint64(1000+i*7919+n), w.SystemBytes)},
				{"role": "user", "content": chat.Words(uint64(i*104729+n), w.UserBytes)},
			}
			for ctx.Err() == nil {
				o, _, wait := send(ctx, client, target, msgs, t.MaxTokens, header)
				record(i, o)
				if o.outcome != "429" {
					return
				}
				pause(ctx, wait)
			}
		}
		workers, each := t.Requests, 1 // burst
		switch t.Mode {
		case ModeSerial:
			workers, each = 1, t.Requests
		case ModeFlood:
			workers, each = t.Clients, 0
		}
		for c := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if t.Mode == ModeBurst {
					written := sync.OnceFunc(sent.Done)
					defer written() // also when it was never written
					one(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
						WroteRequest: func(httptrace.WroteRequestInfo) { written() },
					}), c*100_000)
					return
				}
				sent.Wait()
				for n := 0; ctx.Err() == nil && (each == 0 && time.Now().Before(deadline) || n < each); n++ {
					one(ctx, c*100_000+n)
				}
			}()
		}
	}
	wg.Wait()
	return outcomes, time.Since(start)
}

// summarizeGroups sums a mixed load's requests by tenant (in the order of
// tenants) and by class (interactive, then batch; only classes present).
func summarizeGroups(tenants []Tenant, outcomes []tenantOutcome) (byTenant, byClass []Group) {
	type acc struct {
		g    Group
		ttft []float64
	}
	add := func(a *acc, o loadOutcome) {
		a.g.Requests++
		a.g.ByStatus[o.outcome]++
		if o.outcome == "200" {
			a.g.Completed++
			a.g.CompletedTokens += o.tokens
			a.ttft = append(a.ttft, float64(o.ttft.Microseconds())/1000)
		}
	}
	ts := make([]acc, len(tenants))
	classes := map[string]*acc{}
	for i, t := range tenants {
		ts[i].g = Group{Name: t.Name, Class: t.Class.String(), ByStatus: map[string]int{}}
		if classes[t.Class.String()] == nil {
			classes[t.Class.String()] = &acc{g: Group{Name: t.Class.String(), ByStatus: map[string]int{}}, ttft: []float64{}}
		}
	}
	for _, o := range outcomes {
		add(&ts[o.tenant], o.loadOutcome)
		add(classes[tenants[o.tenant].Class.String()], o.loadOutcome)
	}
	finish := func(a *acc) Group {
		a.g.TTFTP50, a.g.TTFTP99 = quantiles(a.ttft)
		return a.g
	}
	for i := range ts {
		byTenant = append(byTenant, finish(&ts[i]))
	}
	for _, a := range classes {
		byClass = append(byClass, finish(a))
	}
	// Interactive, then batch: the queue's order, and the names' reversed.
	sort.Slice(byClass, func(i, j int) bool { return byClass[i].Name > byClass[j].Name })
	return byTenant, byClass
}
