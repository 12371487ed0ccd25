package core

import (
	"testing"
)

func TestLoneSurrogate(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`"plain"`, -1},
		{`"\u0041\n\\"`, -1},
		{`"\ud83d\ude00"`, -1},
		{`"\\ud800"`, -1},   // an escaped backslash, then text
		{`"\\\\ud800"`, -1}, // two escaped backslashes, then text
		{`"\u12"`, -1},      // malformed: the decoder's business
		{`"\ud800"`, 1},
		{`"ab\uDFFF"`, 3},
		{`"\\\ud800"`, 3},
		{`"\ud83d\ud83d\ude00"`, 1},
		{`"\ud83d\ude00\udc00"`, 13},
		{`"\ud83d`, 1},
		{`\`, -1},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := loneSurrogate([]byte(tt.in)); got != tt.want {
				t.Errorf("loneSurrogate(%s) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}
