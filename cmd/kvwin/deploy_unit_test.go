package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

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

// Metrics the dashboard may use before they exist: issue 13 adds these
// histograms. Once they are in /metrics this list is checked like the
// rest, so a misspelt name still fails.
var pendingMetrics = []string{"kvwin_time_to_first_token_seconds", "kvwin_request_duration_seconds", "kvwin_prompt_tokens"}

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
			if slices.Contains(pendingMetrics, base) && !have[base+"_count"] {
				t.Logf("%s: %s is not in /metrics yet (issue 13's histogram)", p, m)
				continue
			}
			t.Errorf("%s: %s is not in a kvwin node's /metrics (query %q)", p, m, e)
		}
	}
	if used == 0 {
		t.Fatalf("%s: no kvwin metric is queried", p)
	}
}

// scrapeMetricNames starts a kvwin node (the embedded engine) and returns
// the sample names of its /metrics.
func scrapeMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	node := apptest.Start(t, nil)
	resp, err := http.Get(node.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, _, _ := strings.Cut(line, " ")
		n, _, _ = strings.Cut(n, "{")
		names[n] = true
	}
	return names
}
