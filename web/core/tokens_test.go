package core

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestPromptTokenArray: a prompt of token ids reads the same ids with the
// fast path as encoding/json does, and whatever the fast path refuses
// still gets encoding/json's result or error.
func TestPromptTokenArray(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		tokens  []int
		text    string
		wantErr bool
	}{
		{raw: `[1,2,3]`, tokens: []int{1, 2, 3}},
		{raw: " [ 0 ,\n-7,\t42 ] ", tokens: []int{0, -7, 42}},
		{raw: `[999999999999999999]`, tokens: []int{999999999999999999}},
		{raw: `[9223372036854775807]`, tokens: []int{9223372036854775807}}, // 19 digits: encoding/json's
		{raw: `[1, null]`, tokens: []int{1, 0}},                            // encoding/json leaves a null 0
		{raw: `["hi"]`, text: "hi"},
		{raw: `"hi"`, text: "hi"},
		{raw: `[]`, wantErr: true},
		{raw: `[1.5]`, wantErr: true},
		{raw: `[1e3]`, wantErr: true},
		{raw: `[01]`, wantErr: true},
		{raw: `[1,]`, wantErr: true},
		{raw: `[1 2]`, wantErr: true},
		{raw: `[9223372036854775808]`, wantErr: true},
		{raw: `[1, "a"]`, wantErr: true},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			text, tokens, err := Prompt(json.RawMessage(tc.raw))
			if (err != nil) != tc.wantErr || text != tc.text || !slices.Equal(tokens, tc.tokens) {
				t.Errorf("Prompt(%s) = %q, %v, %v; want %q, %v, error %v", tc.raw, text, tokens, err, tc.text, tc.tokens, tc.wantErr)
			}
		})
	}
}

// FuzzTokenArrayAsDecoded: whatever tokenArray accepts, encoding/json
// decodes into the same ids; IsTokenArray accepts exactly the same.
func FuzzTokenArrayAsDecoded(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, ` [ -0 , 12 ]`, `[1.0]`, `[18446744073709551616]`, `[-]`, `[1,,2]`, `[1]x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, ok := tokenArray(b)
		if IsTokenArray(b) != ok {
			t.Fatalf("IsTokenArray(%q) = %v, tokenArray's ok %v", b, !ok, ok)
		}
		if !ok {
			return
		}
		var want []int
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("tokenArray(%q) = %v, encoding/json: %v", b, ids, err)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("tokenArray(%q) = %v, encoding/json %v", b, ids, want)
		}
	})
}

// BenchmarkPromptTokens: a node reading a gateway's prompt of 7,000 ids.
func BenchmarkPromptTokens(b *testing.B) {
	ids := make([]int, 7000)
	for i := range ids {
		ids[i] = (i * 7919) % 32000
	}
	raw, _ := json.Marshal(ids)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, _, err := Prompt(raw); err != nil {
			b.Fatal(err)
		}
	}
}
