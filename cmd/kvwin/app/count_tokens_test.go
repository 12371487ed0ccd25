package app_test

import (
	"encoding/json"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app/apptest"
)

// /v1/messages/count_tokens refuses what /v1/messages refuses of a forced
// tool's schema, with the same 400: both web's check (a keyword the
// grammar cannot enforce) and the engine's (llama.cpp's converter rejects
// the schema). A schema the grammar holds is counted. The token budget is
// the turn's alone: a count has no max_tokens.
func TestCountTokensRefusesTheForcedSchemasMessagesRefuses(t *testing.T) {
	a := apptest.Start(t, nil)
	for _, tc := range []struct {
		name, schema string
		want         string // "" counted
	}{
		{"plain", `{"type":"object","properties":{"city":{"type":"string"}}}`, ""},
		{"a keyword the grammar lacks", `{"type":"object","properties":{"m":{"type":"object","propertyNames":{"pattern":"^a$"}}}}`, `"propertyNames"`},
		{"a pattern the converter rejects", `{"type":"object","properties":{"a":{"type":"string","pattern":"(("}}}`, "could not be turned into a grammar"},
		{"a reference to nothing", `{"type":"object","properties":{"a":{"$ref":"#/nope"}}}`, "could not be turned into a grammar"},
		{"a repetition over the limit", `{"type":"object","properties":{"a":{"type":"string","minLength":100000}}}`, "limit on repetition counts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"kvwin-tiny","max_tokens":64,"messages":[{"role":"user","content":"hi"}],` +
				`"tools":[{"name":"t","input_schema":` + tc.schema + `}],"tool_choice":{"type":"tool","name":"t"}}`
			for _, path := range []string{"/v1/messages/count_tokens", "/v1/messages"} {
				status, _, got := send(t, "POST", a.URL()+path, "application/json", body, nil)
				if tc.want == "" {
					if path == "/v1/messages/count_tokens" {
						var n struct {
							InputTokens int `json:"input_tokens"`
						}
						if status != 200 || json.Unmarshal([]byte(got), &n) != nil || n.InputTokens == 0 {
							t.Fatalf("%s: %d %s, want a count", path, status, got)
						}
					}
					continue
				}
				if status != 400 || !strings.Contains(errorMessage(t, "anthropic", got), tc.want) {
					t.Fatalf("%s: %d %s, want a 400 naming %s", path, status, got, tc.want)
				}
			}
		})
	}
}
