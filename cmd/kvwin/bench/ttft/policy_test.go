package ttft

import (
	"slices"
	"testing"
)

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		in      []string
		want    []Policy
		wantErr bool
	}{
		{[]string{"full-nocache,full,sliding,sink,memory"}, Policies(), false},
		{[]string{"sink", " memory"}, []Policy{Sink, Memory}, false},
		{[]string{"full,full"}, nil, true},
		{[]string{"fifo"}, nil, true},
		{nil, nil, true},
	}
	for _, tt := range tests {
		got, err := ParsePolicies(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("ParsePolicies(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	for _, tt := range []struct {
		p      Policy
		window string
		cuts   bool
		cache  bool
	}{
		{FullNoCache, "full", false, false}, {Full, "full", false, true}, {Sliding, "sliding", true, true},
		{Sink, "sink", true, true}, {Memory, "memory", true, true},
	} {
		if tt.p.Window() != tt.window || tt.p.Cuts() != tt.cuts || tt.p.cachePrompt() != tt.cache {
			t.Errorf("%s: window %q cuts %v cache %v", tt.p, tt.p.Window(), tt.p.Cuts(), tt.p.cachePrompt())
		}
	}
}
