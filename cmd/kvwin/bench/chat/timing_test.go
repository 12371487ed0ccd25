package chat

import (
	"reflect"
	"testing"
)

func TestServerTiming(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]float64
	}{
		{"", map[string]float64{}},
		{"read;dur=0.12, window;dur=1", map[string]float64{"read": 0.12, "window": 1}},
		{`total;desc="all";dur="2.5"`, map[string]float64{"total": 2.5}},
		{"cache;desc=hit, x;dur=abc", map[string]float64{}},
	} {
		if got := ServerTiming(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ServerTiming(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got, want := PhaseText(map[string]float64{"total": 2.5, "read": 0.125}), " | read 0.12 total 2.50"; got != want {
		t.Errorf("PhaseText = %q, want %q", got, want)
	}
}
