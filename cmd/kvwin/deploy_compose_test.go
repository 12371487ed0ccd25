package main

import (
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// composeService is what the compose check reads of a service.
type composeService struct {
	name     string
	names    []string // the service name and its network aliases
	profiles []string
	image    string
	listen   int // the port it serves on inside its container
	raw      map[string]any
}

func strs(v any) []string {
	var out []string
	for _, x := range asList(v) {
		out = append(out, asString(x))
	}
	return out
}

func asList(v any) []any         { l, _ := v.([]any); return l }
func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }
func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case uint64:
		return strconv.FormatUint(x, 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	}
	return ""
}

// argAfter returns the value following flag in args ("" if absent).
func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// checkCompose: the gateway's command and mounted config are valid; its
// published port is the one it listens on; each backend it names is a
// service (or alias) listening on that port in both profiles; GPU
// services reserve a GPU and run CUDA images, CPU services do not.
func checkCompose(t *testing.T, files map[string][]byte, p string) {
	doc := yamlDocs(t, p, files[p])[0]
	var services []composeService
	var gateway *composeService
	var gatewayArgs []string
	var databases []composeService
	for name, v := range asMap(doc["services"]) {
		m := asMap(v)
		s := composeService{name: name, names: []string{name}, profiles: strs(m["profiles"]), image: asString(m["image"]), raw: m}
		s.names = append(s.names, strs(asMap(asMap(asMap(m["networks"])["default"]))["aliases"])...)
		args := strs(m["command"])
		switch {
		case strings.HasPrefix(s.image, "ghcr.io/ggml-org/llama.cpp:server"):
			s.listen, _ = strconv.Atoi(argAfter(args, "--port"))
			if hc := strs(asMap(m["healthcheck"])["test"]); len(hc) > 0 {
				u, err := url.Parse(hc[len(hc)-1])
				if err != nil || u.Port() != strconv.Itoa(s.listen) || u.Path != "/health" {
					t.Errorf("%s: %s's healthcheck %q does not probe /health on its port %d", p, name, hc, s.listen)
				}
			}
		case strings.HasPrefix(s.image, "ollama/ollama"):
			s.listen = port(t, p+" "+name, asString(asMap(m["environment"])["OLLAMA_HOST"]))
		case m["build"] != nil:
			gw := s
			gateway, gatewayArgs = &gw, args
			continue
		case strings.HasPrefix(s.image, "postgres:"):
			if hc := strs(asMap(m["healthcheck"])["test"]); !slices.Contains(hc, "pg_isready") {
				t.Errorf("%s: %s's healthcheck %q does not ask pg_isready", p, name, hc)
			}
			databases = append(databases, s)
			continue
		default:
			t.Fatalf("%s: service %s: image %q is neither kvwin, llama-server nor Ollama", p, name, s.image)
		}
		if s.listen == 0 {
			t.Errorf("%s: service %s: no port it listens on", p, name)
		}
		gpu := slices.Contains(s.profiles, "gpu")
		reserved := len(asList(asMap(asMap(asMap(m["deploy"])["resources"])["reservations"])["devices"])) > 0
		cuda := strings.HasSuffix(s.image, "-cuda") || strings.HasPrefix(s.image, "ollama/ollama")
		if gpu && (!reserved || !cuda) {
			t.Errorf("%s: GPU service %s: reserves a GPU %v, CUDA image %v (%s)", p, name, reserved, cuda, s.image)
		}
		if !gpu && (reserved || strings.HasSuffix(s.image, "-cuda")) {
			t.Errorf("%s: CPU service %s reserves a GPU or runs a CUDA image", p, name)
		}
		services = append(services, s)
	}
	if gateway == nil {
		t.Fatalf("%s: no kvwin service (one with build:)", p)
	}
	checkComposeStore(t, p, gateway, databases)
	flags := serveArgs(t, p+" kvwin command", gatewayArgs)
	var source string
	for _, v := range strs(gateway.raw["volumes"]) {
		if src, dst, _ := strings.Cut(v, ":"); strings.HasPrefix(dst, flags["config"]+":") || dst == flags["config"] {
			source = path.Clean(src)
		}
	}
	if files[source] == nil {
		t.Fatalf("%s: the kvwin service's --config %s is mounted from %q, not a file of deploy/", p, flags["config"], source)
	}
	cfg := checkConfig(t, source, files[source])
	listen := port(t, source, *cfg.Addr)
	published := false
	for _, pp := range strs(gateway.raw["ports"]) {
		if i := strings.LastIndex(pp, ":"); i >= 0 && pp[i+1:] == strconv.Itoa(listen) {
			published = true
		}
	}
	if !published {
		t.Errorf("%s: kvwin listens on %d (%s) but publishes %q", p, listen, source, strs(gateway.raw["ports"]))
	}
	if cfg.APIKeyFile == nil || !slices.ContainsFunc(strs(gateway.raw["secrets"]), func(s string) bool { return *cfg.APIKeyFile == "/run/secrets/"+s }) {
		t.Errorf("%s: api_key_file of %s is not one of the kvwin service's secrets %q", p, source, strs(gateway.raw["secrets"]))
	}
	// One model under one name: the gateway sends a turn only to backends
	// serving the model the request names.
	models := map[string]bool{}
	for _, s := range services {
		if strings.HasPrefix(s.image, "ghcr.io/ggml-org/llama.cpp:server") {
			models[argAfter(strs(s.raw["command"]), "--alias")] = true
		}
	}
	for _, u := range backendURLs(t, source, cfg) {
		if m := u.Query().Get("model"); m != "" {
			models[m] = true
		}
	}
	if len(models) != 1 || models[""] {
		t.Errorf("%s: the nodes serve the models %v (llama-server --alias, Ollama ?model=): want one name", p, models)
	}
	for _, profile := range []string{"cpu", "gpu"} {
		for _, u := range backendURLs(t, source, cfg) {
			found := false
			for _, s := range services {
				if (len(s.profiles) == 0 || slices.Contains(s.profiles, profile)) && slices.Contains(s.names, u.Hostname()) {
					found = true
					if strconv.Itoa(s.listen) != u.Port() {
						t.Errorf("%s: backend %s: %s listens on %d in profile %s", source, u, s.name, s.listen, profile)
					}
				}
			}
			if !found {
				t.Errorf("%s: backend %s: no service named %s in profile %s", source, u, u.Hostname(), profile)
			}
		}
	}
}

// composeVar is a ${VAR...} substitution of compose.
var composeVar = regexp.MustCompile(`\$\{([A-Z_]+)[^}]*\}`)

// checkComposeStore: the gateway's KVWIN_MEMORY_STORE is a postgres://
// DSN of a postgres service, with its user, database and password, and
// the gateway waits for it to be healthy.
func checkComposeStore(t *testing.T, p string, gw *composeService, dbs []composeService) {
	env := asMap(gw.raw["environment"])
	dsn := composeVar.ReplaceAllString(asString(env["KVWIN_MEMORY_STORE"]), "$1")
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "postgres" {
		t.Fatalf("%s: kvwin's KVWIN_MEMORY_STORE %q: want a postgres:// DSN (%v)", p, dsn, err)
	}
	i := slices.IndexFunc(dbs, func(s composeService) bool { return s.name == u.Hostname() })
	if i < 0 || u.Port() != "5432" {
		t.Fatalf("%s: KVWIN_MEMORY_STORE names %s, not a postgres service on 5432", p, u.Host)
	}
	denv := asMap(dbs[i].raw["environment"])
	pw, _ := u.User.Password()
	if asString(denv["POSTGRES_USER"]) != u.User.Username() || asString(denv["POSTGRES_DB"]) != strings.TrimPrefix(u.Path, "/") ||
		composeVar.ReplaceAllString(asString(denv["POSTGRES_PASSWORD"]), "$1") != pw {
		t.Errorf("%s: KVWIN_MEMORY_STORE's user, database or password do not match %s's POSTGRES_* environment", p, dbs[i].name)
	}
	if dig(gw.raw, "depends_on", u.Hostname(), "condition") != "service_healthy" {
		t.Errorf("%s: kvwin does not wait for %s to be healthy", p, u.Hostname())
	}
}
