package web

import (
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
	"kvwin/web/core"
)

// Bucket rules (stated, not tuned to any data): time to first token
// doubles from 5 ms past the default 120 s first-token timeout; request
// duration doubles from 10 ms to about 5 minutes; prompt tokens double
// from one 16-token block to 128k, the longest context of common models.
var (
	ttftBuckets     = prometheus.ExponentialBuckets(0.005, 2, 16)
	durationBuckets = prometheus.ExponentialBuckets(0.01, 2, 16)
	promptBuckets   = prometheus.ExponentialBuckets(16, 2, 14)
	// A turn's phases double from 10 µs (a cached render, the hand-off)
	// to about 84 s.
	phaseBuckets = prometheus.ExponentialBuckets(0.00001, 2, 24)
)

// metrics are the server's own Prometheus collectors: what an operator
// graphs per model and backend. Observing never blocks.
type metrics struct {
	ttft, duration, prompt *prometheus.HistogramVec
	promptTotal, cached    *prometheus.CounterVec
	responses              *prometheus.CounterVec
	phase                  *prometheus.HistogramVec
	recalled               prometheus.Counter
}

func newMetrics() *metrics {
	labels := []string{"model", "backend"}
	return &metrics{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvwin_time_to_first_token_seconds",
			Help: "From the request's arrival to its first generated token (streamed or not).", Buckets: ttftBuckets}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvwin_request_duration_seconds",
			Help: "From the request's arrival to the end of its answer, for generations.", Buckets: durationBuckets}, labels),
		prompt: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvwin_prompt_tokens",
			Help: "Prompt tokens of each generation.", Buckets: promptBuckets}, labels),
		promptTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_prompt_tokens_total",
			Help: "Prompt tokens of finished generations."}, labels),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_cached_tokens_total",
			Help: "Prompt tokens reused from a KV cache instead of computed."}, labels),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvwin_http_responses_total",
			Help: "HTTP responses by route and status (499: the client left)."}, []string{"route", "status"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvwin_turn_phase_seconds",
			Help: "Where a generation's time until its headers went, by phase (the Server-Timing header's).", Buckets: phaseBuckets}, []string{"phase"}),
		recalled: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvwin_tool_answers_recalled_total",
			Help: "Assistant messages with tool calls rendered as the model generated them, not as the client re-serialised them, counted per request."}),
	}
}

// register adds the collectors to reg.
func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.ttft, m.duration, m.prompt, m.promptTotal, m.cached, m.responses, m.phase, m.recalled} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// respond counts one response.
func (m *metrics) respond(c *gin.Context, status int) {
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	m.responses.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

// generation observes one finished generation: ttft from the request's
// arrival to its first token, total from arrival to its end.
func (m *metrics) generation(model, backend string, t engine.Timings, ttft, total time.Duration) {
	m.ttft.WithLabelValues(model, backend).Observe(ttft.Seconds())
	m.duration.WithLabelValues(model, backend).Observe(total.Seconds())
	m.prompt.WithLabelValues(model, backend).Observe(float64(t.PromptTokens))
	m.promptTotal.WithLabelValues(model, backend).Add(float64(t.PromptTokens))
	m.cached.WithLabelValues(model, backend).Add(float64(t.CachedTokens))
}

// phases observes one turn's phases (total included).
func (m *metrics) phases(p core.Phases) {
	p.Each(func(name string, d time.Duration) { m.phase.WithLabelValues(name).Observe(d.Seconds()) })
}
