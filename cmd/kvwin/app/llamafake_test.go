package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// llamaFake is a llama-server of one of the two builds kvwin was tried
// against, keeping its slot rules: a request names its slot (id_slot) or
// gets the one with the longest common prefix, else the least recently
// used; it reuses the slot's common prefix (all but the last prompt token
// at most) and computes the rest; the slot then holds the prompt and the
// answer. Its answers have the build's shape:
//
//	"b-2025-06": no timings.cache_n (tokens_evaluated and timings.prompt_n
//	             say it), /slots only when slotsOn, with each slot's prompt text
//	"b-2026-08": timings.cache_n, /slots by default with counts only
//
// Its vocabulary is byte-level: BOS 1, ChatML's markers 2 and 3, every
// other byte b is 100+b. It records the reuse it counted per request.
type llamaFake struct {
	build   string
	slotsOn bool
	// ignoreNPredict makes it generate past n_predict, until the client
	// leaves.
	ignoreNPredict bool
	fail           string // if set, /completion answers 500 with this text

	// health gets a value at each /health (if not full); slotsAsked
	// counts /slots requests (under mu). A gateway's checks of a backend
	// run one at a time, /health first and /slots last.
	health     chan struct{}
	slotsAsked int

	mu     sync.Mutex
	slots  [][]int // each slot's KV
	used   []int   // when each slot was last used
	clock  int
	reused []int // the reuse counted, per /completion
	srv    *httptest.Server
}

func startLlamaFake(t *testing.T, build string, slots int) *llamaFake {
	t.Helper()
	f := &llamaFake{build: build, slotsOn: build != "b-2025-06", slots: make([][]int, slots), used: make([]int, slots),
		health: make(chan struct{}, 1)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *llamaFake) URL() string { return f.srv.URL }

// restart empties its slots, as a server restarted between two turns.
func (f *llamaFake) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.slots {
		f.slots[i] = nil
	}
}

// slotsRead returns how many times /slots was asked.
func (f *llamaFake) slotsRead() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slotsAsked
}

// waitSlotsRead waits until a gateway's check that read /slots after it
// had been read n times has ended: the first /health after that read.
func (f *llamaFake) waitSlotsRead(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case <-f.health:
			if f.slotsRead() > n {
				return
			}
		case <-deadline:
			t.Fatalf("the gateway did not read /slots (read %d times)", f.slotsRead())
		}
	}
}

// lastReused is the reuse it counted for its last /completion.
func (f *llamaFake) lastReused() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reused) == 0 {
		return -1
	}
	return f.reused[len(f.reused)-1]
}

// byteVocab is a byte-level vocabulary as the tests' fake servers
// tokenize: BOS, named special tokens, and every other byte as base+b.
type byteVocab struct {
	bos, base int
	specials  map[string]int
}

// encode tokenizes s as the server's /tokenize does: BOS first with bos,
// special tokens recognised with special.
func (v byteVocab) encode(s string, bos, special bool) []int {
	out := []int{}
	if bos {
		out = append(out, v.bos)
	}
next:
	for len(s) > 0 {
		if special {
			for tok, id := range v.specials {
				if strings.HasPrefix(s, tok) {
					out, s = append(out, id), s[len(tok):]
					continue next
				}
			}
		}
		out, s = append(out, v.base+int(s[0])), s[1:]
	}
	return out
}

var fakeSpecials = map[string]int{"<|begin_of_text|>": 1, "<|im_start|>": 2, "<|im_end|>": 3}

// fakeVocab is llamaFake's vocabulary.
var fakeVocab = byteVocab{bos: 1, base: 100, specials: fakeSpecials}

func fakeDecode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 100 {
			b.WriteByte(byte(id - 100))
			continue
		}
		for tok, sid := range fakeSpecials {
			if sid == id {
				b.WriteString(tok)
			}
		}
	}
	return b.String()
}

func (f *llamaFake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /health":
		select {
		case f.health <- struct{}{}:
		default:
		}
		reply(200, map[string]string{"status": "ok"})
	case "GET /props":
		props := map[string]any{"default_generation_settings": map[string]any{"n_ctx": 4096}, "total_slots": len(f.slots),
			"model_path": "/models/tiny.gguf", "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"}
		if f.build != "b-2025-06" {
			props["endpoint_slots"] = f.slotsOn
		}
		reply(200, props)
	case "POST /tokenize":
		var in struct {
			Content      string `json:"content"`
			AddSpecial   bool   `json:"add_special"`
			ParseSpecial *bool  `json:"parse_special"`
		}
		_ = json.Unmarshal(body, &in)
		reply(200, map[string]any{"tokens": fakeVocab.encode(in.Content, in.AddSpecial, in.ParseSpecial == nil || *in.ParseSpecial)})
	case "GET /slots":
		f.mu.Lock()
		f.slotsAsked++
		f.mu.Unlock()
		if !f.slotsOn {
			reply(501, map[string]any{"error": map[string]any{"code": 501, "message": "This server does not support slots endpoint. Start it with `--slots`", "type": "not_supported_error"}})
			return
		}
		f.mu.Lock()
		out := []map[string]any{}
		for i, kv := range f.slots {
			s := map[string]any{"id": i, "n_ctx": 4096, "is_processing": false}
			if f.build == "b-2025-06" {
				s["prompt"] = fakeDecode(kv)
			} else if kv != nil {
				s["n_prompt_tokens"], s["n_prompt_tokens_cache"] = len(kv), 0
			}
			out = append(out, s)
		}
		f.mu.Unlock()
		reply(200, out)
	case "POST /completion":
		f.complete(w, r, body)
	default:
		http.NotFound(w, r)
	}
}

func (f *llamaFake) complete(w http.ResponseWriter, r *http.Request, body []byte) {
	if f.fail != "" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(500)
		_, _ = io.WriteString(w, f.fail)
		return
	}
	var in struct {
		Prompt      []int `json:"prompt"`
		IDSlot      int   `json:"id_slot"`
		CachePrompt bool  `json:"cache_prompt"`
		NPredict    int   `json:"n_predict"`
	}
	_ = json.Unmarshal(body, &in)
	f.mu.Lock()
	common := func(kv []int) int {
		n := 0
		for n < len(kv) && n < len(in.Prompt) && kv[n] == in.Prompt[n] {
			n++
		}
		return n
	}
	if in.IDSlot < 0 || in.IDSlot >= len(f.slots) {
		// llama-server's choice: the slot sharing the longest prefix if it
		// is over a tenth of the prompt (--slot-prompt-similarity), else
		// the least recently used.
		best, lru := -1, 0
		for i, kv := range f.slots {
			if c := common(kv); c*10 > len(in.Prompt) && (best < 0 || c > common(f.slots[best])) {
				best = i
			}
			if f.used[i] < f.used[lru] {
				lru = i
			}
		}
		in.IDSlot = lru
		if best >= 0 {
			in.IDSlot = best
		}
	}
	slot := in.IDSlot
	past := 0
	if in.CachePrompt {
		past = min(common(f.slots[slot]), len(in.Prompt)-1)
	}
	f.clock++
	f.used[slot] = f.clock
	f.reused = append(f.reused, past)
	n := in.NPredict
	if n <= 0 {
		n = 4
	}
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	timings := func(predicted int) string {
		t := fmt.Sprintf(`"prompt_n":%d,"prompt_ms":1.5,"predicted_n":%d,"predicted_ms":2.5`, len(in.Prompt)-past, predicted)
		if f.build != "b-2025-06" {
			t = fmt.Sprintf(`"cache_n":%d,`, past) + t
		}
		return "{" + t + "}"
	}
	var gen []int
	for i := 0; i < n || f.ignoreNPredict; i++ {
		tok := 100 + int("ok "[i%3])
		gen = append(gen, tok)
		if _, err := fmt.Fprintf(w, "data: {\"index\":0,\"content\":%q,\"tokens\":[%d],\"stop\":false,\"id_slot\":%d,\"tokens_predicted\":%d,\"tokens_evaluated\":%d,\"timings\":%s}\n\n",
			string(rune(tok-100)), tok, slot, i+1, len(in.Prompt), timings(i+1)); err != nil {
			return
		}
		fl.Flush()
		if r.Context().Err() != nil {
			return
		}
	}
	f.mu.Lock()
	f.slots[slot] = append(append([]int(nil), in.Prompt...), gen[:len(gen)-1]...)
	f.mu.Unlock()
	fmt.Fprintf(w, "data: {\"index\":0,\"content\":\"\",\"tokens\":[],\"id_slot\":%d,\"stop\":true,\"model\":\"tiny\",\"tokens_predicted\":%d,\"tokens_evaluated\":%d,"+
		"\"prompt\":%q,\"truncated\":false,\"stop_type\":\"limit\",\"stopping_word\":\"\",\"tokens_cached\":%d,\"timings\":%s}\n\n",
		slot, len(gen), len(in.Prompt), fakeDecode(in.Prompt), len(in.Prompt)+len(gen), timings(len(gen)))
}
