package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// TestNodeRoutesAnswerForEachModel: with two models: entries, /props,
// /slots and /tokenize answer for the model each request names (the
// first without a name), not for the first model only.
func TestNodeRoutesAnswerForEachModel(t *testing.T) {
	a := twoModels(t, nil)
	for _, m := range []struct {
		name       string
		slots, ctx int
	}{{"a", 2, 2048}, {"b", 1, 1024}, {"", 2, 2048}} {
		t.Run("model="+m.name, func(t *testing.T) {
			var props struct {
				Settings struct {
					NCtx int `json:"n_ctx"`
				} `json:"default_generation_settings"`
				TotalSlots int    `json:"total_slots"`
				ModelAlias string `json:"model_alias"`
			}
			getJSON(t, a.URL()+"/props?model="+m.name, &props)
			want := m.name
			if want == "" {
				want = "a"
			}
			if props.ModelAlias != want || props.TotalSlots != m.slots || props.Settings.NCtx != m.ctx {
				t.Fatalf("/props?model=%s = %+v, want model %s with %d slots of %d", m.name, props, want, m.slots, m.ctx)
			}

			body, _ := json.Marshal(map[string]string{"model": m.name, "content": "hello"})
			resp, err := http.Post(a.URL()+"/tokenize", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var tok struct {
				Tokens []int `json:"tokens"`
			}
			err = json.NewDecoder(resp.Body).Decode(&tok)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || len(tok.Tokens) == 0 {
				t.Fatalf("/tokenize with model %q = %d %+v (%v), want tokens", m.name, resp.StatusCode, tok, err)
			}

			var slots []struct {
				ID  int `json:"id"`
				Ctx int `json:"n_ctx"`
			}
			getJSON(t, a.URL()+"/slots?model="+m.name, &slots)
			if len(slots) != m.slots || slots[0].Ctx != m.ctx {
				t.Fatalf("/slots?model=%s = %+v, want %d slots of %d", m.name, slots, m.slots, m.ctx)
			}
		})
	}
}
