package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// unitFile parses a systemd unit: section → key → values (a key may repeat).
func unitFile(data []byte) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if ok && section != "" {
				out[section][k] = append(out[section][k], v)
			}
		}
	}
	return out
}

// checkUnit: ExecStart runs kvwin serve with flags that exist, as a
// dedicated user, with the system read-only and the data dir the one
// writable path.
func checkUnit(t *testing.T, files map[string][]byte, p string) {
	u := unitFile(files[p])
	svc := u["Service"]
	if svc == nil {
		t.Fatalf("%s: no [Service]", p)
	}
	exec := strings.Fields(strings.Join(svc["ExecStart"], " "))
	if len(exec) < 2 || !strings.HasSuffix(exec[0], "/kvwin") || exec[1] != "serve" {
		t.Fatalf("%s: ExecStart %q: want /…/kvwin serve", p, exec)
	}
	flags := serveArgs(t, p+" ExecStart", exec[2:])
	if got := svc["ReadWritePaths"]; !slices.Equal(got, []string{flags["data-dir"]}) {
		t.Errorf("%s: ReadWritePaths %q: want the data dir %q only", p, got, flags["data-dir"])
	}
	if user := svc["User"]; len(user) != 1 || user[0] == "" || user[0] == "root" {
		t.Errorf("%s: User %q: want a dedicated user", p, user)
	}
	for k, want := range map[string]string{
		"ProtectSystem": "strict", "PrivateTmp": "yes", "NoNewPrivileges": "yes", "ProtectHome": "yes",
		"PrivateDevices": "yes", "CapabilityBoundingSet": "",
	} {
		if got := svc[k]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s: %s=%q, want %q", p, k, got, want)
		}
	}
	if sd := svc["StateDirectory"]; len(sd) != 1 || "/var/lib/"+sd[0] != flags["data-dir"] {
		t.Errorf("%s: StateDirectory %q is not the data dir %s", p, sd, flags["data-dir"])
	}
}

// checkSysusers: the user is the unit's, at home in its data dir.
func checkSysusers(t *testing.T, files map[string][]byte, p string) {
	var unit map[string]map[string][]string
	for name, data := range files {
		if strings.HasSuffix(name, ".service") {
			unit = unitFile(data)
		}
	}
	var fields []string
	sc := bufio.NewScanner(bytes.NewReader(files[p]))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			fields = regexp.MustCompile(`"[^"]*"|\S+`).FindAllString(line, -1)
		}
	}
	if len(fields) != 5 || fields[0] != "u" {
		t.Fatalf("%s: want one line: u NAME ID \"GECOS\" HOME, got %q", p, fields)
	}
	svc := unit["Service"]
	if !slices.Equal(svc["User"], []string{fields[1]}) || "/var/lib/"+strings.Join(svc["StateDirectory"], "") != fields[4] {
		t.Errorf("%s: user %s home %s; the unit runs as %q with state in %q", p, fields[1], fields[4], svc["User"], svc["StateDirectory"])
	}
}

// Metrics the dashboard may use before they exist: issue 13 adds them.
// One is excused only while no Go source of kvwin defines it; once one
// does, it must be in /metrics like the rest, so a misspelt name fails.
var pendingMetrics = []string{
	"kvwin_time_to_first_token_seconds", "kvwin_request_duration_seconds", "kvwin_prompt_tokens",
	"kvwin_http_responses_total", "kvwin_router_decisions_total",
}

// definedInSource reports whether a non-test Go file of the module names
// the metric as a string literal.
func definedInSource(t *testing.T, name string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		found = bytes.Contains(data, []byte(`"`+name+`"`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// checkDashboard: every metric a panel or variable queries is in the
// /metrics of a real kvwin node.
func checkDashboard(t *testing.T, files map[string][]byte, p string) {
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(files[p], &dash); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	var exprs []string
	for _, panel := range dash.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("%s: panel %q queries nothing", p, panel.Title)
		}
		for _, tg := range panel.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	have := scrapeMetricNames(t)
	name := regexp.MustCompile(`\b(?:kvwin|process|go)_[a-z0-9_]+`)
	used := 0
	for _, e := range exprs {
		for _, m := range name.FindAllString(e, -1) {
			used++
			if have[m] {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
			if slices.Contains(pendingMetrics, base) && !definedInSource(t, base) {
				t.Logf("%s: %s is not defined yet (issue 13)", p, m)
				continue
			}
			t.Errorf("%s: %s is not in a kvwin node's /metrics (query %q)", p, m, e)
		}
	}
	if used == 0 {
		t.Fatalf("%s: no kvwin metric is queried", p)
	}
}

// scrapeMetricNames starts a kvwin node (the embedded engine) and a gateway
// over it, sends one turn through them (metrics with labels appear only
// once observed), and returns the sample names of both /metrics.
func scrapeMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	node := apptest.Start(t, func(f *app.Config) { f.Slots = 2 })
	gw := apptest.Start(t, func(f *app.Config) { f.Backends = []string{"llamaserver=" + node.URL()} })
	turn := apptest.PostWith(t, gw.URL(), nil, map[string]any{
		"max_tokens": 2, "messages": apptest.Msgs("user", "metrics, please"),
	})
	if turn.Status != 200 {
		t.Fatalf("turn through the gateway: %d %s", turn.Status, turn.Body)
	}
	names := map[string]bool{}
	for _, a := range []*app.App{node, gw} {
		resp, err := http.Get(a.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			n, _, _ := strings.Cut(line, " ")
			n, _, _ = strings.Cut(n, "{")
			names[n] = true
		}
	}
	return names
}
