package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// End-to-end tests of traces (docs/observability.md): real servers export
// to a real OTLP receiver in the test, and the spans it decodes are
// checked against the answers the client got.

// secretMarker is in every prompt the tests send: no span may hold it.
const secretMarker = "zanzibar-marker-7731"

// phaseNames are the names a turn's child spans may have.
var phaseNames = []string{"read", "window", "render", "tokenize", "queue", "prefill", "first_token", "decode"}

// usage is what an answer said of its tokens, and its text.
type usage struct {
	in, out, cached int
	text            string
}

// traceparent is a client's W3C traceparent for trace n, and its span id.
func traceparent(n int) (header, traceID, spanID string) {
	traceID, spanID = fmt.Sprintf("%032x", 0xabc000+n), fmt.Sprintf("%016x", 0xdef000+n)
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// apiTurn is one request of an API and how to read its usage.
type apiTurn struct {
	name, path, body string
	headers          map[string]string
	usage            func(t *testing.T, h http.Header, body string) usage
}

// apiTurns are a chat turn in each API, streamed and not, as tenant alice.
func apiTurns() []apiTurn {
	ask := `"Tell me about ` + secretMarker + ` and the sea."`
	bearer := map[string]string{"Authorization": "Bearer " + aliceKey}
	return []apiTurn{
		{"openai", "/v1/chat/completions", `{"model":"kvwin-tiny","max_tokens":8,"messages":[{"role":"user","content":` + ask + `}]}`, bearer, openAIUsage},
		{"openai stream", "/v1/chat/completions", `{"model":"kvwin-tiny","max_tokens":8,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":` + ask + `}]}`, bearer, openAIStreamUsage},
		{"ollama", "/api/chat", `{"model":"kvwin-tiny","stream":false,"options":{"num_predict":8},"messages":[{"role":"user","content":` + ask + `}]}`, bearer, ollamaUsage},
		{"anthropic", "/v1/messages", `{"model":"kvwin-tiny","max_tokens":8,"messages":[{"role":"user","content":` + ask + `}]}`,
			map[string]string{"x-api-key": aliceKey, "anthropic-version": "2023-06-01"}, messagesUsage},
		{"responses", "/v1/responses", `{"model":"kvwin-tiny","max_output_tokens":8,"store":false,"input":` + ask + `}`, bearer, responsesUsage},
	}
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
}

func openAIUsage(t *testing.T, _ http.Header, body string) usage {
	var r apptest.ChatReply
	decode(t, body, &r)
	return usage{in: r.Usage.PromptTokens, out: r.Usage.CompletionTokens, cached: *r.Usage.PromptTokensDetails.CachedTokens, text: r.Choices[0].Message.Content}
}

func openAIStreamUsage(t *testing.T, _ http.Header, body string) usage {
	var u usage
	var text strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		decode(t, line, &chunk)
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
		if chunk.Usage != nil {
			u = usage{in: chunk.Usage.PromptTokens, out: chunk.Usage.CompletionTokens, cached: chunk.Usage.PromptTokensDetails.CachedTokens}
		}
	}
	if u.in == 0 {
		t.Fatalf("no usage in the stream: %s", body)
	}
	u.text = text.String()
	return u
}

func ollamaUsage(t *testing.T, h http.Header, body string) usage {
	var r struct {
		Message         struct{ Content string } `json:"message"`
		PromptEvalCount int                      `json:"prompt_eval_count"`
		EvalCount       int                      `json:"eval_count"`
	}
	decode(t, body, &r)
	return usage{in: r.PromptEvalCount, out: r.EvalCount, cached: apptest.Atoi(h.Get("X-Kvwin-Cached-Tokens")), text: r.Message.Content}
}

func messagesUsage(t *testing.T, _ http.Header, body string) usage {
	var r struct {
		Content []struct{ Text string } `json:"content"`
		Usage   struct {
			InputTokens          int `json:"input_tokens"`
			CacheReadInputTokens int `json:"cache_read_input_tokens"`
			OutputTokens         int `json:"output_tokens"`
		} `json:"usage"`
	}
	decode(t, body, &r)
	var text strings.Builder
	for _, c := range r.Content {
		text.WriteString(c.Text)
	}
	// Anthropic counts cached input apart; the span counts the prompt.
	return usage{in: r.Usage.InputTokens + r.Usage.CacheReadInputTokens, out: r.Usage.OutputTokens,
		cached: r.Usage.CacheReadInputTokens, text: text.String()}
}

func responsesUsage(t *testing.T, _ http.Header, body string) usage {
	var r struct {
		Output []struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"output"`
		Usage struct {
			InputTokens        int `json:"input_tokens"`
			OutputTokens       int `json:"output_tokens"`
			InputTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	decode(t, body, &r)
	var text strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			text.WriteString(c.Text)
		}
	}
	return usage{in: r.Usage.InputTokens, out: r.Usage.OutputTokens, cached: r.Usage.InputTokensDetails.CachedTokens, text: text.String()}
}

// sendTraced sends turn with the client's traceparent n and returns the
// usage its answer reported.
func sendTraced(t *testing.T, base string, turn apiTurn, n int) usage {
	t.Helper()
	tp, _, _ := traceparent(n)
	headers := map[string]string{"traceparent": tp}
	for k, v := range turn.headers {
		headers[k] = v
	}
	status, h, body := send(t, http.MethodPost, base+turn.path, "application/json", turn.body, headers)
	if status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", turn.name, status, body)
	}
	return turn.usage(t, h, body)
}

// inTrace returns the spans of trace id.
func inTrace(spans []apptest.Span, id string) []apptest.Span {
	var out []apptest.Span
	for _, s := range spans {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// turnSpan returns the one turn span (kind server) of spans whose resource
// has kvwin.role role.
func turnSpan(t *testing.T, spans []apptest.Span, role string) apptest.Span {
	t.Helper()
	var turns []apptest.Span
	for _, s := range spans {
		if s.Kind == "SPAN_KIND_SERVER" && s.Resource["kvwin.role"] == role {
			turns = append(turns, s)
		}
	}
	if len(turns) != 1 {
		t.Fatalf("%d turn spans of a %s, want 1: %+v", len(turns), role, spans)
	}
	return turns[0]
}

// checkPhases checks that turn's children in spans are its phases, laid
// end to end over it, so they add up to it.
func checkPhases(t *testing.T, turn apptest.Span, spans []apptest.Span) {
	t.Helper()
	var phases []apptest.Span
	for _, s := range spans {
		if s.Parent == turn.SpanID && s.Kind != "SPAN_KIND_SERVER" { // a node's turn is a gateway turn's child too
			phases = append(phases, s)
		}
	}
	sort.Slice(phases, func(i, j int) bool { return phases[i].Start.Before(phases[j].Start) })
	if len(phases) < 2 {
		t.Fatalf("turn %q has %d phase spans, want its phases: %+v", turn.Name, len(phases), phases)
	}
	at, names := turn.Start, []string{}
	for _, p := range phases {
		if !slices.Contains(phaseNames, p.Name) || p.Kind != "SPAN_KIND_INTERNAL" {
			t.Errorf("child %q (%s) of the turn is not a phase", p.Name, p.Kind)
		}
		if !p.Start.Equal(at) || !p.End.After(p.Start) {
			t.Errorf("phase %q spans %v..%v, want to start at %v and last", p.Name, p.Start, p.End, at)
		}
		at = p.End
		names = append(names, p.Name)
	}
	if d := turn.End.Sub(at); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("phases end %v from the turn's end, want within 1 ms (phases %v)", d, names)
	}
	for _, want := range []string{"read", "window", "prefill"} {
		if !slices.Contains(names, want) {
			t.Errorf("phases %v lack %s", names, want)
		}
	}
}

// checkUsage checks turn's attributes against what the client was told.
func checkUsage(t *testing.T, turn apptest.Span, want usage, op string) {
	t.Helper()
	for key, v := range map[string]any{
		"gen_ai.usage.input_tokens": int64(want.in), "gen_ai.usage.output_tokens": int64(want.out),
		"gen_ai.usage.cache_read.input_tokens": int64(want.cached), "gen_ai.request.model": "kvwin-tiny",
		"gen_ai.operation.name": op, "kvwin.tenant": "alice",
	} {
		if got := turn.Attrs[key]; got != v {
			t.Errorf("%s: %s = %v (%T), want %v", turn.Name, key, got, got, v)
		}
	}
	if b, _ := turn.Attrs["kvwin.backend"].(string); b == "" {
		t.Errorf("%s: no kvwin.backend: %v", turn.Name, turn.Attrs)
	}
	if turn.Name != op+" kvwin-tiny" {
		t.Errorf("turn span named %q, want %q", turn.Name, op+" kvwin-tiny")
	}
}

// checkNoSecrets fails if any span's name, attribute or resource holds a
// key, the prompts' marker or an answer's text.
func checkNoSecrets(t *testing.T, spans []apptest.Span, answers []string) {
	t.Helper()
	secrets := []string{aliceKey, adminKey, nodeAdminKey, secretMarker}
	for _, a := range answers {
		if a = strings.TrimSpace(a); len(a) >= 8 {
			secrets = append(secrets, a)
		}
	}
	for _, s := range spans {
		values := []string{s.Name, s.StatusReason}
		for _, m := range []map[string]any{s.Attrs, s.Resource} {
			for k, v := range m {
				values = append(values, k, fmt.Sprint(v))
			}
		}
		for _, v := range values {
			for _, secret := range secrets {
				if strings.Contains(v, secret) {
					t.Errorf("span %q holds %q in %q", s.Name, secret, v)
				}
			}
		}
	}
}

// TestTracesOfEveryAPI: a turn in each API, each under its own client
// traceparent, is one server span, the child of the client's span, whose
// children are its phases laid end to end, and whose token attributes are
// the usage the client got; no span holds a key or text.
func TestTracesOfEveryAPI(t *testing.T) {
	recv := apptest.StartOTLPReceiver(t)
	f := apptest.Flags(t)
	withKeys(&f)
	f.OTLPEndpoint = recv.URL
	node, stop := apptest.Run(t, f)
	t.Cleanup(stop)

	turns := apiTurns()
	got := make([]usage, len(turns))
	for i, turn := range turns {
		got[i] = sendTraced(t, node.URL(), turn, i)
	}
	stop() // flushes the spans not yet exported

	spans := recv.Spans()
	var answers []string
	traced := 0
	for i, turn := range turns {
		t.Run(turn.name, func(t *testing.T) {
			_, traceID, parent := traceparent(i)
			trace := inTrace(spans, traceID)
			ts := turnSpan(t, trace, "node")
			if ts.Parent != parent {
				t.Errorf("turn's parent %q, want the client's span %q", ts.Parent, parent)
			}
			if _, ok := ts.Attrs["kvwin.slot"].(int64); !ok {
				t.Errorf("no kvwin.slot on the embedded engine's turn: %v", ts.Attrs)
			}
			checkPhases(t, ts, trace)
			checkUsage(t, ts, got[i], "chat")
		})
		answers = append(answers, got[i].text)
		_, traceID, _ := traceparent(i)
		traced += len(inTrace(spans, traceID))
	}
	if traced != len(spans) {
		t.Errorf("%d spans received, %d of them in the turns' traces", len(spans), traced)
	}
	checkNoSecrets(t, spans, answers)
}

// TestTraceAcrossGatewayAndNode: a turn through a gateway is one trace
// holding the gateway's turn (the client's span its parent) and the
// node's (the gateway's turn its parent), each with its phases and the
// client's usage, streamed or not.
func TestTraceAcrossGatewayAndNode(t *testing.T) {
	recv := apptest.StartOTLPReceiver(t)
	gf := apptest.Flags(t)
	withKeys(&gf)
	gf.BackendKey, gf.OTLPEndpoint = nodeAdminKey, recv.URL
	var stopNodes []func()
	for range 2 { // two nodes export to the same receiver: one turn is on one of them
		nf := apptest.Flags(t)
		nf.Slots, nf.AdminKey, nf.OTLPEndpoint = 2, nodeAdminKey, recv.URL
		node, stopNode := apptest.Run(t, nf)
		t.Cleanup(stopNode)
		stopNodes = append(stopNodes, stopNode)
		gf.Backends = append(gf.Backends, "llamaserver="+node.URL())
	}
	gw, stopGateway := apptest.Run(t, gf)
	t.Cleanup(stopGateway)

	turns := apiTurns()[:2] // OpenAI chat, whole and streamed
	got := make([]usage, len(turns))
	for i, turn := range turns {
		got[i] = sendTraced(t, gw.URL(), turn, i)
	}
	stopGateway()
	for _, stop := range stopNodes {
		stop()
	}

	spans := recv.Spans()
	var answers []string
	for i, turn := range turns {
		t.Run(turn.name, func(t *testing.T) {
			_, traceID, parent := traceparent(i)
			trace := inTrace(spans, traceID)
			g, n := turnSpan(t, trace, "gateway"), turnSpan(t, trace, "node")
			if g.Parent != parent || n.Parent != g.SpanID {
				t.Errorf("parents: gateway %q (want the client's %q), node %q (want the gateway's %q)", g.Parent, parent, n.Parent, g.SpanID)
			}
			// The node's turn may end after the gateway's: it finishes its
			// own writing after the gateway has read the last event.
			if n.Start.Before(g.Start) {
				t.Errorf("node turn starts at %v, before the gateway's %v", n.Start, g.Start)
			}
			checkPhases(t, g, trace)
			checkUsage(t, g, got[i], "chat")
			// The gateway sends the node the prompt's tokens (llama-server's
			// /completion): a completion there.
			checkPhases(t, n, trace)
			checkUsage(t, n, got[i], "text_completion")
		})
		answers = append(answers, got[i].text)
	}
	checkNoSecrets(t, spans, answers)
}

// TestTraceExporters: each way to name a collector exports a turn's trace
// there: the flag over OTLP/HTTP and over gRPC, and the standard variable.
func TestTraceExporters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grpc  bool
		setup func(t *testing.T, f *app.Config, url string)
	}{
		{"flag http", false, func(_ *testing.T, f *app.Config, url string) { f.OTLPEndpoint = url }},
		{"flag grpc", true, func(_ *testing.T, f *app.Config, url string) { f.OTLPEndpoint, f.OTLPProtocol = url, app.OTLPGRPC }},
		{"variable http", false, func(t *testing.T, f *app.Config, url string) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			f.OTLPFromEnv = true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv := apptest.StartOTLPReceiver(t)
			if tc.grpc {
				recv = apptest.StartOTLPGRPCReceiver(t)
			}
			f := apptest.Flags(t)
			withKeys(&f)
			tc.setup(t, &f, recv.URL)
			node, stop := apptest.Run(t, f)
			t.Cleanup(stop)
			got := sendTraced(t, node.URL(), apiTurns()[0], 1)
			stop()
			_, traceID, _ := traceparent(1)
			trace := inTrace(recv.Spans(), traceID)
			checkUsage(t, turnSpan(t, trace, "node"), got, "chat")
		})
	}
}

// TestTracingOff: with no endpoint named, a server makes no exporter, even
// with OTEL_EXPORTER_OTLP_ENDPOINT set in its process (cmd/kvwin alone
// reads the environment): nothing reaches the collector that variable
// names. A gateway that does not trace still passes its client's
// traceparent on, so a node that traces is the client span's child.
func TestTracingOff(t *testing.T) {
	recv := apptest.StartOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	nodeRecv := apptest.StartOTLPReceiver(t)
	nf := apptest.Flags(t)
	nf.Slots, nf.AdminKey, nf.OTLPEndpoint = 2, nodeAdminKey, nodeRecv.URL
	node, stopNode := apptest.Run(t, nf)
	t.Cleanup(stopNode)
	gf := apptest.Flags(t)
	withKeys(&gf)
	gf.Backends, gf.BackendKey = []string{"llamaserver=" + node.URL()}, nodeAdminKey
	gw, stopGateway := apptest.Run(t, gf)
	t.Cleanup(stopGateway)
	of := apptest.Flags(t)
	withKeys(&of)
	off, stopOff := apptest.Run(t, of)
	t.Cleanup(stopOff)

	for i, turn := range apiTurns()[:2] {
		sendTraced(t, off.URL(), turn, 10+i)
	}
	sendTraced(t, gw.URL(), apiTurns()[0], 20)
	stopOff()
	stopGateway()
	stopNode()
	if n := recv.Exports(); n != 0 {
		t.Fatalf("servers without an endpoint exported %d times", n)
	}

	_, traceID, parent := traceparent(20)
	spans := nodeRecv.Spans()
	for _, s := range spans {
		if s.Resource["kvwin.role"] != "node" {
			t.Errorf("a span of a server not tracing: %+v", s)
		}
	}
	if n := turnSpan(t, inTrace(spans, traceID), "node"); n.Parent != parent {
		t.Errorf("node turn's parent %q, want the client's %q passed on by the gateway", n.Parent, parent)
	}
}
