// Package config is kvwin serve's configuration file: a YAML document with
// one key per serve flag (the flag's name in snake_case, --window-budget →
// window_budget), plus the keys only a file can say: models (several models
// served side by side) and max_loaded_models.
//
// Decoding is strict: an unknown key, a wrong type or a duplicate key is an
// error naming its position as FILE:LINE:COLUMN. A key absent from the file
// leaves its flag's default; cmd/kvwin applies present keys only to flags
// not given on the command line, so the command line wins.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
)

// File is the decoded configuration file. Every flag key is a pointer (or
// a slice): nil means the key is absent and the flag keeps its value.
type File struct {
	Addr                     *string   `yaml:"addr"`
	DataDir                  *string   `yaml:"data_dir"`
	Model                    *string   `yaml:"model"`
	Slots                    *int      `yaml:"slots"`
	Ctx                      *int      `yaml:"ctx"`
	Threads                  *int      `yaml:"threads"`
	Batch                    *int      `yaml:"batch"`
	Seed                     *int64    `yaml:"seed"`
	Queue                    *int      `yaml:"queue"`
	QueueOrder               *string   `yaml:"queue_order"`
	InteractiveSlots         *int      `yaml:"interactive_slots"`
	Window                   *string   `yaml:"window"`
	Shift                    *bool     `yaml:"shift"`
	WindowBudget             *int      `yaml:"window_budget"`
	MaxBody                  *int64    `yaml:"max_body"`
	MaxItems                 *int      `yaml:"max_items"`
	MemoryMaxBytes           *int64    `yaml:"memory_max_bytes"`
	ShutdownTimeout          *Duration `yaml:"shutdown_timeout"`
	Verbose                  *bool     `yaml:"verbose"`
	LogFormat                *string   `yaml:"log_format"`
	NoSnapshots              *bool     `yaml:"no_snapshots"`
	SnapshotMaxBytes         *int64    `yaml:"snapshot_max_bytes"`
	KVRAM                    *int64    `yaml:"kv_ram"`
	KVRAMTenantPercent       *int      `yaml:"kv_ram_tenant_percent"`
	Backend                  []string  `yaml:"backend"`
	Route                    *string   `yaml:"route"`
	APIKey                   []string  `yaml:"api_key"`
	APIKeyFile               *string   `yaml:"api_key_file"`
	AdminKey                 *string   `yaml:"admin_key"`
	NoAuth                   *bool     `yaml:"no_auth"`
	CORSOrigin               []string  `yaml:"cors_origin"`
	AllowedHost              []string  `yaml:"allowed_host"`
	BackendAPIKey            *string   `yaml:"backend_api_key"`
	TenantMaxConcurrent      *int      `yaml:"tenant_max_concurrent"`
	TenantMaxQueued          *int      `yaml:"tenant_max_queued"`
	MemoryTTL                *Duration `yaml:"memory_ttl"`
	MemoryStore              *string   `yaml:"memory_store"`
	MemoryStoreTimeout       *Duration `yaml:"memory_store_timeout"`
	StreamKeepalive          *Duration `yaml:"stream_keepalive"`
	BackendConnectTimeout    *Duration `yaml:"backend_connect_timeout"`
	BackendFirstTokenTimeout *Duration `yaml:"backend_first_token_timeout"`
	BackendIdleTimeout       *Duration `yaml:"backend_idle_timeout"`
	BackendResolveInterval   *Duration `yaml:"backend_resolve_interval"`
	OTLPEndpoint             *string   `yaml:"otlp_endpoint"`
	OTLPProtocol             *string   `yaml:"otlp_protocol"`

	// MaxLoadedModels bounds the embedded models loaded at once (0: no
	// bound); loading one more unloads the least recently used.
	MaxLoadedModels int `yaml:"max_loaded_models"`
	// Models are served side by side under their names.
	Models []Model `yaml:"models"`
}

// Model is one entry of models: a name and either an embedded GGUF file
// (Model) or remote backends (Backends, KIND=URL as for --backend).
// Zero-valued optional fields take the top-level flags' values.
type Model struct {
	Name         string   `yaml:"name"`
	Model        string   `yaml:"model"`
	Backends     []string `yaml:"backends"`
	Slots        int      `yaml:"slots"`
	Ctx          int      `yaml:"ctx"`
	Window       string   `yaml:"window"`
	WindowBudget int      `yaml:"window_budget"`
	TTL          Duration `yaml:"ttl"` // unload after this long idle (0: stay loaded)

	line int // where the entry starts, for validation errors
}

// fileOnly are the keys of File that no flag sets.
var fileOnly = map[string]bool{"max_loaded_models": true, "models": true}

// Keys lists every key the file accepts, in schema order: the top-level
// keys, then each models entry's keys as "models[].name". Deploy
// examples and docs are checked against it.
func Keys() []string {
	keys := tags(reflect.TypeFor[File]())
	for _, k := range tags(reflect.TypeFor[Model]()) {
		keys = append(keys, "models[]."+k)
	}
	return keys
}

// FlagKeys lists the top-level keys that are flags of kvwin serve (the flag
// name is the key with '_' replaced by '-').
func FlagKeys() []string {
	var keys []string
	for _, k := range tags(reflect.TypeFor[File]()) {
		if !fileOnly[k] {
			keys = append(keys, k)
		}
	}
	return keys
}

func tags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("yaml"); tag != "" {
			out = append(out, tag)
		}
	}
	return out
}

// Error is a problem in a configuration file at a position (Line and
// Column start at 1; 0 when the position is unknown).
type Error struct {
	File         string
	Line, Column int
	Msg          string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Load reads and validates the file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates data; name is used in error positions.
func Parse(name string, data []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.Strict())
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // an empty file is an empty configuration
		return nil, decodeError(name, err)
	}
	if err := f.locate(name, data); err != nil {
		return nil, err
	}
	if err := f.validate(name); err != nil {
		return nil, err
	}
	return &f, nil
}

// decodeError turns go-yaml's errors into FILE:LINE:COLUMN messages that
// name the key.
func decodeError(name string, err error) error {
	var pe *Error
	if errors.As(err, &pe) {
		pe.File = name
		return pe
	}
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		return &Error{File: name, Msg: err.Error()}
	}
	tok := ye.GetToken()
	e := &Error{File: name, Line: tok.Position.Line, Column: tok.Position.Column, Msg: ye.GetMessage()}
	var unknown *yaml.UnknownFieldError
	var typ *yaml.TypeError
	switch {
	case errors.As(err, &unknown):
		e.Msg = fmt.Sprintf("unknown key %q", tok.Value)
	case errors.As(err, &typ):
		e.Msg = fmt.Sprintf("value %q: want %s", tok.Value, kind(typ.DstType))
	}
	return e
}

// kind names a Go type as the file's author knows it.
func kind(t reflect.Type) string {
	switch {
	case t == nil:
		return "another type"
	case t == reflect.TypeFor[Duration]():
		return kindDuration
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

// locate records where each models entry starts, for validation errors.
func (f *File) locate(name string, data []byte) error {
	for i := range f.Models {
		p, err := yaml.PathString("$.models[" + strconv.Itoa(i) + "]")
		if err != nil {
			return &Error{File: name, Msg: err.Error()}
		}
		if n, err := p.ReadNode(bytes.NewReader(data)); err == nil && n != nil {
			f.Models[i].line = n.GetToken().Position.Line
		}
	}
	return nil
}

// validate checks what decoding cannot: models entries are complete and
// unique, and no number is negative.
func (f *File) validate(name string) error {
	errAt := func(line int, format string, args ...any) error {
		return &Error{File: name, Line: line, Column: 1, Msg: fmt.Sprintf(format, args...)}
	}
	if f.MaxLoadedModels < 0 {
		return &Error{File: name, Msg: fmt.Sprintf("max_loaded_models %d: must not be negative", f.MaxLoadedModels)}
	}
	if len(f.Models) > 0 && (f.Model != nil || len(f.Backend) > 0) {
		return &Error{File: name, Msg: "models: each entry names its own model or backends; remove the top-level model and backend keys"}
	}
	seen := map[string]bool{}
	for i, m := range f.Models {
		where := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "":
			return errAt(m.line, "%s: name is required", where)
		case seen[m.Name]:
			return errAt(m.line, "%s: name %q is used twice", where, m.Name)
		case m.Model != "" && len(m.Backends) > 0:
			return errAt(m.line, "%s (%s): give model or backends, not both", where, m.Name)
		case m.Model == "" && len(m.Backends) == 0:
			return errAt(m.line, "%s (%s): model FILE.gguf or backends [KIND=URL] is required", where, m.Name)
		case m.Slots < 0 || m.Ctx < 0 || m.WindowBudget < 0 || m.TTL < 0:
			return errAt(m.line, "%s (%s): slots, ctx, window_budget and ttl must not be negative", where, m.Name)
		}
		for _, b := range m.Backends {
			if k, u, ok := strings.Cut(b, "="); !ok || k == "" || u == "" {
				return errAt(m.line, "%s (%s): backend %q: want KIND=URL", where, m.Name, b)
			}
		}
		seen[m.Name] = true
	}
	return nil
}

// FlagValues returns, for each flag key present in the file, the values to
// set its flag to, as the command line would spell them (a list key gives
// one value per element). Keys absent from the file are left out.
func (f *File) FlagValues() map[string][]string {
	out := map[string][]string{}
	v := reflect.ValueOf(f).Elem()
	t := v.Type()
	for i := range t.NumField() {
		key := t.Field(i).Tag.Get("yaml")
		if key == "" || fileOnly[key] {
			continue
		}
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Slice:
			if fv.IsNil() {
				continue
			}
			vals := make([]string, fv.Len())
			for j := range vals {
				vals[j] = fv.Index(j).String()
			}
			out[key] = vals
		case reflect.Pointer:
			if fv.IsNil() {
				continue
			}
			out[key] = []string{fmt.Sprint(fv.Elem().Interface())} // Duration prints as 30s
		}
	}
	return out
}

// FlagName is the serve flag a key sets.
func FlagName(key string) string { return strings.ReplaceAll(key, "_", "-") }
