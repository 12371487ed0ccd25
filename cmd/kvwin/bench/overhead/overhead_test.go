package overhead

import (
	"reflect"
	"testing"
)

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
