package idle

import (
	"testing"
	"time"
)

// wait returns whether done closed within a generous deadline.
func wait(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-time.After(3 * time.Minute):
		return false
	}
}

// Bytes before the first token (headers, keep-alive comments) do not
// extend the first-token wait: a server that accepts and only trickles
// keep-alives is still cut off.
func TestKicksBeforeTheFirstTokenDoNotExtendTheWait(t *testing.T) {
	done := make(chan struct{})
	w := New(20*time.Millisecond, time.Hour, func() { close(done) })
	defer w.Stop()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				w.Kick()
				time.Sleep(time.Millisecond)
			}
		}
	}()
	fired := wait(done)
	close(stop)
	if !fired || !w.Fired() {
		t.Fatal("the first-token timeout did not fire while only kicks came")
	}
}

// After the first token, silence is bounded by the idle timeout.
func TestSilenceAfterTheFirstTokenIsBoundedByIdle(t *testing.T) {
	done := make(chan struct{})
	w := New(time.Hour, 20*time.Millisecond, func() { close(done) })
	defer w.Stop()
	w.Started()
	w.Kick()
	if !wait(done) || !w.Fired() {
		t.Fatal("the idle timeout did not fire after the first token")
	}
}

// A paused watchdog does not fire: the caller's own time is not silence.
func TestPausedWatchdogWaitsForItsKick(t *testing.T) {
	done := make(chan struct{})
	w := New(time.Hour, 20*time.Millisecond, func() { close(done) })
	defer w.Stop()
	w.Started()
	w.Pause()
	select {
	case <-done:
		t.Fatal("fired while paused")
	case <-time.After(100 * time.Millisecond):
	}
	w.Kick()
	if !wait(done) {
		t.Fatal("did not fire after the kick that ended the pause")
	}
}
