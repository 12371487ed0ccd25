package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"kvwin/cmd/kvwin/config"
)

// The files of deploy/ name kvwin's flags, config keys, ports and metrics.
// No container runtime runs in CI, so nothing is built or started from
// them; instead every file is parsed and each name it uses is checked
// against the real thing: flags against kvwin serve's flag set (values
// parsed as the command line would), config files against the config
// schema (strict decoding, then applied to the flags), ports against the
// ports the named service listens on, metrics against a real /metrics.

const deployDir = "../../deploy"

// deployFiles maps each file under deploy/ (relative path) to its bytes.
func deployFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(deployDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(deployDir, p)
		files[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("deploy/ is empty")
	}
	return files
}

// yamlDocs decodes every document of a YAML stream.
func yamlDocs(t *testing.T, name string, data []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// serveArgs parses args (what follows "kvwin serve") with serve's own flag
// set: an unknown flag or a value of the wrong kind fails. It returns the
// flags, for their values.
func serveArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	fl := newServeCmd().Flags()
	if err := fl.Parse(args); err != nil {
		t.Fatalf("%s: kvwin serve %q: %v", where, args, err)
	}
	if fl.NArg() > 0 {
		t.Fatalf("%s: kvwin serve takes no arguments, got %q", where, fl.Args())
	}
	got := map[string]string{}
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			got[name] = fl.Lookup(name).Value.String()
		}
	}
	return got
}

// checkConfig decodes a kvwin config file strictly, checks that each key is
// in config.Keys, and applies it to serve's flags, which parse every value.
// It returns the decoded file.
func checkConfig(t *testing.T, name string, data []byte) *config.File {
	t.Helper()
	f, err := config.Parse(name, data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	keys := config.Keys()
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for k, v := range raw {
		if !slices.Contains(keys, k) {
			t.Errorf("%s: key %q is not in the config schema", name, k)
		}
		if k == "models" {
			for _, m := range v.([]any) {
				for mk := range m.(map[string]any) {
					if !slices.Contains(keys, "models[]."+mk) {
						t.Errorf("%s: models key %q is not in the config schema", name, mk)
					}
				}
			}
		}
	}
	fl := newServeCmd().Flags()
	for key, vals := range f.FlagValues() {
		for _, v := range vals {
			if err := fl.Set(config.FlagName(key), v); err != nil {
				t.Errorf("%s: %s: %v", name, key, err)
			}
		}
	}
	return f
}

// port returns the port of a HOST:PORT address.
func port(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		t.Fatalf("%s: address %q has no port", where, addr)
	}
	return n
}

// backendURLs returns the URLs of a config's --backend values.
func backendURLs(t *testing.T, where string, f *config.File) []*url.URL {
	t.Helper()
	var out []*url.URL
	for _, spec := range f.Backend {
		kind, raw, ok := strings.Cut(spec, "=")
		if !ok || (kind != "llamaserver" && kind != "ollama") {
			t.Fatalf("%s: backend %q: want llamaserver=URL or ollama=URL", where, spec)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			t.Fatalf("%s: backend %q: want a URL with a port", where, spec)
		}
		if kind == "ollama" && u.Query().Get("model") == "" {
			t.Errorf("%s: backend %q: an Ollama backend needs ?model=", where, spec)
		}
		out = append(out, u)
	}
	return out
}

// TestDeployFiles checks every file under deploy/; a file no check knows
// fails, so a new file gets a check.
func TestDeployFiles(t *testing.T) {
	files := deployFiles(t)
	checks := []struct {
		match func(string) bool
		check func(*testing.T, map[string][]byte, string)
	}{
		{func(p string) bool { return strings.HasPrefix(p, "config/") }, checkConfigFile},
		{func(p string) bool { return p == "compose.yaml" }, checkCompose},
		{func(p string) bool { return p == ".env" }, checkComposeEnv},
		{func(p string) bool { return p == "Dockerfile" }, checkDockerfile},
		{func(p string) bool { return strings.HasPrefix(p, "kubernetes/") }, checkKubernetes},
		{func(p string) bool { return strings.HasSuffix(p, ".service") }, checkUnit},
		{func(p string) bool { return strings.HasSuffix(p, ".sysusers") }, checkSysusers},
		{func(p string) bool { return strings.HasSuffix(p, ".json") }, checkDashboard},
	}
	for _, p := range slices.Sorted(mapKeys(files)) {
		t.Run(p, func(t *testing.T) {
			for _, c := range checks {
				if c.match(p) {
					c.check(t, files, p)
					return
				}
			}
			t.Fatalf("no check knows deploy/%s", p)
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func checkConfigFile(t *testing.T, files map[string][]byte, p string) {
	f := checkConfig(t, p, files[p])
	if f.Addr == nil || port(t, p, *f.Addr) == 0 {
		t.Errorf("%s: no addr with a port", p)
	}
	backendURLs(t, p, f)
}

// checkComposeEnv: the default profile is one compose.yaml defines.
func checkComposeEnv(t *testing.T, files map[string][]byte, p string) {
	sc := bufio.NewScanner(bytes.NewReader(files[p]))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "COMPOSE_PROFILES="); ok {
			if !bytes.Contains(files["compose.yaml"], []byte(`profiles: ["`+v+`"]`)) {
				t.Errorf("%s: profile %q is not in compose.yaml", p, v)
			}
			return
		}
	}
	t.Errorf("%s: no COMPOSE_PROFILES", p)
}

// checkDockerfile: the CMD's flags exist, and the port it listens on is
// the one EXPOSEd.
func checkDockerfile(t *testing.T, files map[string][]byte, p string) {
	var entry, cmd []string
	var exposed []int
	sc := bufio.NewScanner(bytes.NewReader(files[p]))
	for sc.Scan() {
		line := sc.Text()
		switch word, rest, _ := strings.Cut(line, " "); word {
		case "ENTRYPOINT", "CMD":
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				t.Fatalf("%s: %s is not a JSON array: %v", p, line, err)
			}
			if word == "CMD" {
				cmd = args
			} else {
				entry = args
			}
		case "EXPOSE":
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			exposed = append(exposed, n)
		}
	}
	if len(entry) != 2 || filepath.Base(entry[0]) != "kvwin" || entry[1] != "serve" {
		t.Fatalf("%s: ENTRYPOINT %q: want kvwin serve", p, entry)
	}
	flags := serveArgs(t, p+" CMD", cmd)
	if got := port(t, p, flags["addr"]); !slices.Contains(exposed, got) {
		t.Errorf("%s: CMD listens on %d, EXPOSE says %v", p, got, exposed)
	}
	// The build uses the Makefile's cgo flags (else ggml builds without
	// SIMD) and the Go of go.mod.
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"CGO_CFLAGS", "CGO_CXXFLAGS"} {
		m := regexp.MustCompile(`(?m)^export ` + v + `\s*:=\s*(.+)$`).FindSubmatch(makefile)
		if m == nil {
			t.Fatalf("Makefile sets no %s", v)
		}
		if want := v + `="` + strings.TrimSpace(string(m[1])) + `"`; !bytes.Contains(files[p], []byte(want)) {
			t.Errorf("%s: no %s, as the Makefile sets", p, want)
		}
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil || !bytes.Contains(files[p], []byte("FROM golang:"+string(goVersion[1])+"-")) {
		t.Errorf("%s: the build stage is not golang:%s (go.mod)", p, goVersion[1])
	}
}
