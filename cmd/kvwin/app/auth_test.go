package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvwin/engine/queue"
	"kvwin/web"
)

// Keys of the tests (as tenant_test.go's).
const (
	aliceKey = "alice-key-0123456789"
	bobKey   = "bob-key-0123456789ab"
	adminKey = "admin-key-0123456789"
)

// loadKeys reads --api-key and --api-key-file, refuses a public address
// without keys, and never shows a key in its errors.
func TestLoadKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("# tenants\nalice="+aliceKey+"\n\n  bob = "+bobKey+"  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, _, err := loadKeys(Config{Addr: "127.0.0.1:8080", APIKeyFile: file, APIKeys: []string{"carol=carol-key-0123456789"}})
	if err != nil || len(keys) != 3 || keys[aliceKey] != "alice" || keys[bobKey] != "bob" || keys["carol-key-0123456789"] != "carol" {
		t.Fatalf("keys %v, err %v", keys, err)
	}
	for _, tc := range []struct {
		name string
		f    Config
	}{
		{"a public address without keys", Config{Addr: "0.0.0.0:8080"}},
		{"all interfaces without keys", Config{Addr: ":8080"}},
		{"a malformed key", Config{Addr: "127.0.0.1:8080", APIKeys: []string{"alice"}}},
		{"a key used twice", Config{Addr: "127.0.0.1:8080", APIKeys: []string{"a=" + aliceKey, "b=" + aliceKey}}},
		{"a bad tenant name", Config{Addr: "127.0.0.1:8080", APIKeys: []string{"a b=" + aliceKey}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := loadKeys(tc.f)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), aliceKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
	for _, f := range []Config{{Addr: "0.0.0.0:8080", NoAuth: true}, {Addr: "0.0.0.0:8080", AdminKey: adminKey}, {Addr: "[::1]:8080"}, {Addr: "localhost:8080"}} {
		if _, _, err := loadKeys(f); err != nil {
			t.Errorf("%+v refused: %v", f, err)
		}
	}
}

// TestLoadKeyOptions: a key's line may add its class, weight and tokens per
// minute after TENANT=KEY; a line of the older format means what it meant;
// a bad option names the line and the option, never the key.
func TestLoadKeyOptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	lines := "alice=" + aliceKey + "\nbob = " + bobKey + "  class=batch weight=2 tpm=60000\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, policies, err := loadKeys(Config{Addr: "127.0.0.1:8080", APIKeyFile: file})
	if err != nil || keys[aliceKey] != "alice" || keys[bobKey] != "bob" {
		t.Fatalf("keys %v, err %v", keys, err)
	}
	if p := policies[bobKey]; p != (web.KeyPolicy{Class: queue.Batch, Weight: 2, TokensPerMinute: 60000}) || policies[aliceKey] != (web.KeyPolicy{}) {
		t.Errorf("policies %+v", policies)
	}
	for _, spec := range []string{"bob=" + bobKey + " class=urgent", "bob=" + bobKey + " weight=1000", "bob=" + bobKey + " " + aliceKey} {
		_, _, err := loadKeys(Config{Addr: "127.0.0.1:8080", APIKeys: []string{spec}})
		if err == nil || strings.Contains(err.Error(), bobKey) || strings.Contains(err.Error(), aliceKey) || !strings.Contains(err.Error(), "--api-key #1") {
			t.Errorf("%q: error %v, want one naming the flag, not the key", spec[4:], err)
		}
	}
}
