package ollama

import (
	"encoding/json"
	"testing"
)

// Ollama's Go client sends absent parameter fields as null; they are
// dropped, except where null is data.
func TestDropNulls(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"type":"object","required":null,"properties":null}`, `{"type":"object"}`},
		{`{"type":"object","properties":{"a":{"type":"string","items":null,"enum":["x",null]}}}`,
			`{"properties":{"a":{"enum":["x",null],"type":"string"}},"type":"object"}`},
		{`{"const":null,"default":null}`, `{"const":null,"default":null}`},
		{`{"type":"object"}`, `{"type":"object"}`},
	}
	for _, tt := range tests {
		if got := string(dropNulls(json.RawMessage(tt.in))); got != tt.want {
			t.Errorf("dropNulls(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
