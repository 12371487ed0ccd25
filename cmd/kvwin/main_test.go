package main

import (
	"os"
	"testing"

	"kvwin/cmd/kvwin/app/apptest"
)

// TestMain removes the test model the servers of this binary shared.
func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}
