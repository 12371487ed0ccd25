package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// chromium is Debian's chromium package; the browser test never downloads one.
const chromium = "/usr/bin/chromium"

// TestDashboardInARealBrowser drives chromium against a gateway that has
// served traffic and has an admin key: the page asks for the key, then
// shows every backend and the model, a TTFT chart with a point per
// generation, and the routing decisions. KVWIN_SCREENSHOT names where to
// keep the screenshot (default: the test's temporary directory).
func TestDashboardInARealBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no %s (apt-get install chromium): %v", chromium, err)
	}
	const adminKey = "dashboard-admin-key"
	var specs []string
	var nodes []*app.App
	for range 2 {
		n := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx = 2, 4096 })
		nodes = append(nodes, n)
		specs = append(specs, "llamaserver="+n.URL())
	}
	gw := apptest.Start(t, func(f *app.Config) {
		f.Backends, f.Route, f.AdminKey, f.APIKeys = specs, "prefix", adminKey, []string{"alice=alice-key-0123456789"}
		f.Window = "sliding"
	})
	auth := map[string]string{"Authorization": "Bearer alice-key-0123456789"}
	turns := 0
	for conv := range 3 {
		history := apptest.Msgs("system", apptest.Words(100+conv, 80))
		for turn := range 3 {
			history = append(history, apptest.Msgs("user", apptest.Words(10*conv+turn, 60+150*turn))...)
			r := apptest.PostWith(t, gw.URL(), auth, map[string]any{"messages": history, "max_tokens": 3, "temperature": 0,
				"prompt_cache_key": fmt.Sprintf("conv-%d", conv)})
			if r.Status != 200 {
				t.Fatalf("conversation %d turn %d: %d %s", conv, turn, r.Status, r.Body)
			}
			history = append(history, apptest.Msgs("assistant", "ok")...)
			turns++
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-extensions", true),
		chromedp.Flag("no-first-run", true), chromedp.WindowSize(1400, 1200))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	err := chromedp.Do(ctx,
		chromedp.Navigate(gw.URL()+"/"),
		chromedp.WaitVisible(chromedp.ID("key")), // keys configured: the page asks for the admin key
		chromedp.SendKeys(chromedp.ID("key"), adminKey),
		chromedp.Click(chromedp.CSS("#login-form button")), // the form's submit event, as a user sends it
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	// The page fetches every 2 s: wait for a point per generation.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf("document.querySelectorAll('#ttft-chart circle.pt').length >= %d", turns),
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		png, _ := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		shot := filepath.Join(t.TempDir(), "dashboard-failed.png")
		os.WriteFile(shot, png, 0o644)
		if p := os.Getenv("KVWIN_SCREENSHOT"); p != "" {
			os.WriteFile(p, png, 0o644)
		}
		t.Fatalf("the TTFT chart never showed %d points: %v (screenshot %s)", turns, err, shot)
	}
	text := func(id string) string {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("text of #%s: %v", id, err)
		}
		return s
	}
	points, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll('#ttft-chart circle.pt').length"))
	if err != nil {
		t.Fatal(err)
	}
	backends, models, routing := text("backends"), text("models"), text("routing")
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := os.Getenv("KVWIN_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s (%d bytes)", shot, len(png))

	if points != turns {
		t.Errorf("TTFT chart has %d points, want %d (one per generation)", points, turns)
	}
	for _, n := range nodes {
		if !strings.Contains(backends, n.URL()) && !strings.Contains(backends, n.Addr()) {
			t.Errorf("backend %s not on the page:\n%s", n.URL(), backends)
		}
	}
	slots, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll('#backends .slot').length"))
	if err != nil || slots != 4 {
		t.Errorf("the page shows %d slots, want 4 (two nodes of 2): %v", slots, err)
	}
	if model := gw.Router().Info().Model; model == "" || !strings.Contains(models, model) {
		t.Errorf("model %q not on the page:\n%s", model, models)
	}
	if !strings.Contains(routing, "prefix") {
		t.Errorf("no routing decisions on the page:\n%s", routing)
	}
}
