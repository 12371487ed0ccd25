package core

import (
	"strings"
	"testing"
)

// CheckName: a store's key is bounded, valid UTF-8 and free of NUL; what is
// not is a 400 naming the parameter, with the code saying which rule.
func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		code        string // "" accepted
	}{
		{"plain", "my-project", ""},
		{"empty", "", ""},
		{"non-ASCII", "été-日", ""},
		{"at the bound", strings.Repeat("x", 16), ""},
		{"over the bound", strings.Repeat("x", 17), CodeInvalidValue},
		{"NUL", "a\x00b", CodeInvalidEncoding},
		{"invalid UTF-8", "a\xffb", CodeInvalidEncoding},
		{"truncated rune", "é"[:1], CodeInvalidEncoding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckName("prompt_cache_key", tc.value, 16)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			status, e := Classify(err)
			if status != 400 || e.Code != tc.code || e.Param != "prompt_cache_key" || !strings.Contains(e.Message, "prompt_cache_key") {
				t.Fatalf("%d %+v, want 400 %s naming prompt_cache_key", status, e, tc.code)
			}
			if strings.Contains(e.Message, tc.value) {
				t.Fatalf("the message quotes the name back: %q", e.Message)
			}
		})
	}
}

// CutAt cuts at a character, never inside one.
func TestCutAt(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"ééé", 3, "é"}, // byte 3 is inside the second é
		{"ééé", 4, "éé"},
		{"é", 1, ""},
	} {
		if got := CutAt(tc.s, tc.n); got != tc.want {
			t.Errorf("CutAt(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
