package chat

import "testing"

func TestWords(t *testing.T) {
	for _, n := range []int{0, 1, 7, 200} {
		a, b := Words(3, n), Words(3, n)
		if len(a) != n || a != b {
			t.Fatalf("Words(3, %d) = %q, then %q: want %d bytes, the same twice", n, a, b, n)
		}
	}
	if Words(3, 200) == Words(4, 200) {
		t.Fatal("seeds 3 and 4 drew the same text")
	}
}

func TestDelta(t *testing.T) {
	tests := []struct {
		data, text string
		ok         bool
	}{
		{`{"choices":[{"delta":{"content":"ab"}}]}`, "ab", true},
		{`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`, "ab", true},
		{`{"choices":[{"delta":{}}]}`, "", true},
		{`{"error":{"message":"boom"}}`, "", false},
		{`not json`, "", false},
	}
	for _, tt := range tests {
		if text, ok := Delta(tt.data); text != tt.text || ok != tt.ok {
			t.Errorf("Delta(%s) = %q, %v; want %q, %v", tt.data, text, ok, tt.text, tt.ok)
		}
	}
}
