package overhead

import (
	"reflect"
	"testing"
)

func TestParseServerTiming(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]float64
	}{
		{"", map[string]float64{}},
		{"read;dur=0.12, window;dur=1", map[string]float64{"read": 0.12, "window": 1}},
		{`total;desc="all";dur="2.5"`, map[string]float64{"total": 2.5}},
		{"cache;desc=hit, x;dur=abc", map[string]float64{}},
	} {
		if got := ParseServerTiming(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseServerTiming(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// A history has the length asked for, ends with the changed short user
// message, and differs between variants only there.
func TestHistoryChangesOnlyTheLastMessage(t *testing.T) {
	a, b := History(1, 42, 1), History(1, 42, 2)
	if len(a) != 42 || a[0].Role != "system" || a[41].Role != "user" {
		t.Fatalf("history %d messages, first %q last %q", len(a), a[0].Role, a[41].Role)
	}
	if !reflect.DeepEqual(a[:41], b[:41]) || a[41] == b[41] {
		t.Errorf("variants differ elsewhere than the last message, or not there")
	}
	if reflect.DeepEqual(History(2, 42, 1)[0], a[0]) {
		t.Errorf("two seeds share the system prompt")
	}
}
