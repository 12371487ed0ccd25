package idle

import (
	"testing"
	"time"
)

func TestBounds(t *testing.T) {
	tests := []struct {
		name                                    string
		call, idle, connect, first              time.Duration
		wantErr                                 string
		wantCall, wantIdle, wantConn, wantFirst time.Duration
	}{
		{name: "zero takes the defaults", wantCall: 1, wantIdle: 2, wantConn: 3, wantFirst: 4},
		{name: "set values stay", call: 10, idle: 20, connect: 30, first: 40, wantCall: 10, wantIdle: 20, wantConn: 30, wantFirst: 40},
		{name: "the first negative is named", idle: -time.Second, connect: -time.Second, wantErr: "x: idle timeout -1s is negative"},
		{name: "first token", first: -time.Minute, wantErr: "x: first-token timeout -1m0s is negative"},
		{name: "call", call: -1, wantErr: "x: timeout -1ns is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call, idle, connect, first := tt.call, tt.idle, tt.connect, tt.first
			b := Bounds{Call: &call, Idle: &idle, Connect: &connect, FirstToken: &first}
			err := b.Check("x")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Check = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check = %v", err)
			}
			b.Default(1, 2, 3, 4)
			if call != tt.wantCall || idle != tt.wantIdle || connect != tt.wantConn || first != tt.wantFirst {
				t.Errorf("after Default: %v %v %v %v, want %v %v %v %v", call, idle, connect, first, tt.wantCall, tt.wantIdle, tt.wantConn, tt.wantFirst)
			}
		})
	}
}
