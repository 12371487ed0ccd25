package zero

import (
	"reflect"
	"testing"
	"time"
)

// TestFill: a zero field takes the default, a set one (negative, false
// defaults included) stays, and unexported fields are left alone.
func TestFill(t *testing.T) {
	type config struct {
		Name    string
		Slots   int
		Rate    float64
		Timeout time.Duration
		Tags    []string
		hidden  int
	}
	d := config{Name: "d", Slots: 4, Rate: 2.5, Timeout: time.Second, Tags: []string{"x"}, hidden: 9}
	c := config{Slots: -1, Timeout: 3 * time.Second}
	Fill(&c, d)
	want := config{Name: "d", Slots: -1, Rate: 2.5, Timeout: 3 * time.Second, Tags: []string{"x"}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v, want %+v", c, want)
	}
}
