package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/cmd/kvwin/config"
)

// TestEveryServeFlagHasAKey: the file's schema and serve's flags name the
// same settings, both ways.
func TestEveryServeFlagHasAKey(t *testing.T) {
	keys := config.FlagKeys()
	var flags []string
	newServeCmd().Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Name == "config" || fl.Name == "check" {
			return
		}
		flags = append(flags, fl.Name)
		if !slices.Contains(keys, strings.ReplaceAll(fl.Name, "-", "_")) {
			t.Errorf("flag --%s has no key in the config file", fl.Name)
		}
	})
	for _, k := range keys {
		if !slices.Contains(flags, config.FlagName(k)) {
			t.Errorf("key %q has no flag --%s", k, config.FlagName(k))
		}
	}
}

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvwin.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFileUnderCommandLine: a key sets its flag; a flag given on the
// command line wins.
func TestConfigFileUnderCommandLine(t *testing.T) {
	path := writeConfig(t, "slots: 3\nctx: 1024\nshutdown_timeout: 2s\ncors_origin: [https://a, https://b]\n")
	cmd := newServeCmd()
	fl := cmd.Flags()
	if err := fl.Parse([]string{"--config", path, "--ctx", "512"}); err != nil {
		t.Fatal(err)
	}
	if _, err := applyConfig(fl, path); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"slots": "3", "ctx": "512", "shutdown-timeout": (2 * time.Second).String(), "cors-origin": "[https://a,https://b]"} {
		if got := fl.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}
}

// TestCheck: --check prints ok for a valid file and fails naming the line
// of an unknown key, and fails for what a load would fail on: a model file
// that is missing, or slots × ctx whose KV cache cannot be allocated.
func TestCheck(t *testing.T) {
	model, err := ensureTinyModel(apptest.ModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	good := writeConfig(t, "max_loaded_models: 1\nmodels:\n  - name: a\n    model: "+model+"\n  - name: b\n    model: "+model+"\n    ttl: 5m\n")
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"serve", "--config", good, "--check"})
	if err := root.Execute(); err != nil {
		t.Fatalf("valid file: %v", err)
	}
	if want := good + ": ok (2 models)\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}

	bad := writeConfig(t, "slots: 2\nbogus_key: 1\n")
	root = newRootCmd()
	root.SetArgs([]string{"serve", "--config", bad, "--check"})
	err = root.Execute()
	if err == nil || err.Error() != bad+`:2:1: unknown key "bogus_key"` {
		t.Fatalf("err = %v", err)
	}

	for _, tc := range []struct{ name, file, want string }{
		{"missing model", "model: " + filepath.Join(t.TempDir(), "gone.gguf") + "\n", "gone.gguf"},
		{"missing model of models", "models:\n  - name: a\n    model: " + model + "\n  - name: b\n    model: /nonexistent/b.gguf\n", "models[1] (b)"},
		{"impossible ctx", "model: " + model + "\nctx: 100000000\n", "does not fit"},
		{"impossible ctx, test model", "data_dir: " + t.TempDir() + "\nctx: 100000000\nslots: 4\n", "does not fit"},
		{"impossible ctx of models", "models:\n  - name: a\n    model: " + model + "\n    ctx: 100000000\n", "does not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, tc.file)
			var out bytes.Buffer
			root := newRootCmd()
			root.SetOut(&out)
			root.SetArgs([]string{"serve", "--config", p, "--check"})
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) || out.Len() != 0 {
				t.Fatalf("--check: err %v, output %q; want an error naming %q", err, out.String(), tc.want)
			}
		})
	}
}

// TestMemoryStoreFromEnvironment: --memory-store comes from the command
// line, else the config file, else KVWIN_MEMORY_STORE (a password stays out
// of the process list).
func TestMemoryStoreFromEnvironment(t *testing.T) {
	t.Setenv(envMemoryStore, "postgres://env@db/kvwin")
	file := writeConfig(t, "memory_store: sqlite:/from/file.db\n")
	tests := []struct {
		name   string
		given  map[string][]string
		config string
		want   string
	}{
		{"environment", nil, "", "postgres://env@db/kvwin"},
		{"file over environment", nil, file, "sqlite:/from/file.db"},
		{"flag over both", map[string][]string{"memory-store": {"/from/flag.db"}}, file, "/from/flag.db"},
	}
	for _, tc := range tests {
		f, err := reloadConfig(tc.given, tc.config)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if f.MemoryStore != tc.want {
			t.Errorf("%s: --memory-store %q, want %q", tc.name, f.MemoryStore, tc.want)
		}
	}
}

// TestOTLPFromEnvironment: an OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variable
// turns tracing on (the exporter reads it itself); the protocol comes from
// the flag, else the file, else the traces variable, else the general one.
func TestOTLPFromEnvironment(t *testing.T) {
	file := writeConfig(t, "otlp_protocol: grpc\n")
	tests := []struct {
		name     string
		env      map[string]string
		given    map[string][]string
		config   string
		wantOn   bool
		wantProt string
	}{
		{"nothing", nil, nil, "", false, ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, nil, "", true, ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, nil, "", true, ""},
		{"protocols", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, nil, "", false, "grpc"},
		{"file over environment", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, nil, file, false, "grpc"},
		{"flag over environment", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, map[string][]string{"otlp-protocol": {"http/protobuf"}}, "", false, "http/protobuf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(name, tc.env[name])
			}
			f, err := reloadConfig(tc.given, tc.config)
			if err != nil {
				t.Fatal(err)
			}
			if f.OTLPFromEnv != tc.wantOn || f.OTLPProtocol != tc.wantProt {
				t.Errorf("from env %v, protocol %q; want %v, %q", f.OTLPFromEnv, f.OTLPProtocol, tc.wantOn, tc.wantProt)
			}
		})
	}
}
