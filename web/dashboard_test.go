package web

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardForBrowsersOnly: GET / from a browser is the embedded
// dashboard; Ollama clients keep Ollama's root answer; with keys, the page
// itself is open (it asks for the admin key), its data is not.
func TestDashboardForBrowsersOnly(t *testing.T) {
	ts := startServer(t, newFake(), Config{AdminKey: "admin-key-0123456789", APIKeys: map[string]string{"tenant-key-0123456789": "alice"}}, nil)
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/", nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "connect-src 'self'") || !bytes.Equal(page, dashboardHTML) {
		t.Fatalf("browser GET /: %d %v", resp.StatusCode, resp.Header)
	}
	for _, asset := range []string{"/kvwin/v1/status", "/kvwin/v1/traffic", "Authorization", "ttft-chart"} {
		if !strings.Contains(string(dashboardHTML), asset) {
			t.Errorf("the page does not use %s", asset)
		}
	}
	if strings.Contains(string(dashboardHTML), "https://") || strings.Contains(string(dashboardHTML), "EventSource") {
		t.Error("the page loads something from outside, or holds a stream open")
	}
	r2, body := do(t, ts, http.MethodGet, "/", "")
	if r2.StatusCode != 200 || string(body) != "Ollama is running" {
		t.Fatalf("client GET /: %d %q", r2.StatusCode, body)
	}
	r3, _ := do(t, ts, http.MethodGet, "/kvwin/v1/traffic", "")
	if r3.StatusCode != http.StatusUnauthorized {
		t.Fatalf("traffic without the admin key: %d", r3.StatusCode)
	}
}
