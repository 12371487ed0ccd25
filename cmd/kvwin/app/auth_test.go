package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	keys, err := loadKeys(Config{Addr: "127.0.0.1:8080", APIKeyFile: file, APIKeys: []string{"carol=carol-key-0123456789"}})
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
			_, err := loadKeys(tc.f)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), aliceKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
	for _, f := range []Config{{Addr: "0.0.0.0:8080", NoAuth: true}, {Addr: "0.0.0.0:8080", AdminKey: adminKey}, {Addr: "[::1]:8080"}, {Addr: "localhost:8080"}} {
		if _, err := loadKeys(f); err != nil {
			t.Errorf("%+v refused: %v", f, err)
		}
	}
}
