package config

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestParseErrorsNameKeyAndPosition(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown top-level key", "slots: 2\nbogus_key: 1\n", `kvwin.yaml:2:1: unknown key "bogus_key"`},
		{"unknown key in a model", "models:\n  - name: a\n    model: a.gguf\n    colour: red\n", `kvwin.yaml:4:5: unknown key "colour"`},
		{"wrong type", "addr: 127.0.0.1:1\nslots: four\n", `kvwin.yaml:2:8: value "four": want an integer`},
		{"bad duration", "memory_ttl: soon\n", `kvwin.yaml:1:13: value "soon": want a duration such as 30s or 720h`},
		{"model without a source", "models:\n  - name: a\n  - name: b\n    model: b.gguf\n", `kvwin.yaml:2:1: models[0] (a): model FILE.gguf or backends [KIND=URL] is required`},
		{"duplicate name", "models:\n  - name: a\n    model: a.gguf\n  - name: a\n    model: b.gguf\n", `kvwin.yaml:4:1: models[1]: name "a" is used twice`},
		{"models and a top-level model", "model: x.gguf\nmodels:\n  - name: a\n    model: a.gguf\n", `kvwin.yaml: models: each entry names its own model or backends; remove the top-level model and backend keys`},
		{"bad backend", "models:\n  - name: a\n    backends: [http://x]\n", `kvwin.yaml:2:1: models[0] (a): backend "http://x": want KIND=URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("kvwin.yaml", []byte(tc.doc))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("err = %q\nwant  %q", err, tc.want)
			}
		})
	}
}

func TestParseAndFlagValues(t *testing.T) {
	doc := `# two models, one loaded at a time
window_budget: 1500
shutdown_timeout: 3s
cors_origin: [https://a, https://b]
no_snapshots: true
max_loaded_models: 1
models:
  - name: chat
    model: chat.gguf
    slots: 2
    ttl: 10m
  - name: code
    backends: [ollama=http://c?model=x]
`
	f, err := Parse("kvwin.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"window_budget":    {"1500"},
		"shutdown_timeout": {"3s"},
		"cors_origin":      {"https://a", "https://b"},
		"no_snapshots":     {"true"},
	}
	if got := f.FlagValues(); !reflect.DeepEqual(got, want) {
		t.Fatalf("FlagValues = %v, want %v", got, want)
	}
	if f.MaxLoadedModels != 1 || len(f.Models) != 2 {
		t.Fatalf("max_loaded_models %d, %d models", f.MaxLoadedModels, len(f.Models))
	}
	if m := f.Models[0]; m.Name != "chat" || m.Model != "chat.gguf" || m.Slots != 2 || m.TTL != Duration(10*time.Minute) {
		t.Fatalf("models[0] = %+v", m)
	}
	if m := f.Models[1]; m.Name != "code" || !slices.Equal(m.Backends, []string{"ollama=http://c?model=x"}) {
		t.Fatalf("models[1] = %+v", m)
	}
}

func TestEmptyFileIsEmptyConfig(t *testing.T) {
	f, err := Parse("empty.yaml", []byte("# nothing\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.FlagValues()) != 0 || len(f.Models) != 0 {
		t.Fatalf("empty file set %v", f.FlagValues())
	}
}

func TestKeys(t *testing.T) {
	keys := Keys()
	for _, k := range []string{"window_budget", "backend_first_token_timeout", "max_loaded_models", "models", "models[].name", "models[].ttl", "models[].backends"} {
		if !slices.Contains(keys, k) {
			t.Errorf("Keys() lacks %q", k)
		}
	}
	if slices.Contains(FlagKeys(), "models") || slices.Contains(FlagKeys(), "max_loaded_models") {
		t.Error("FlagKeys lists a file-only key")
	}
}
