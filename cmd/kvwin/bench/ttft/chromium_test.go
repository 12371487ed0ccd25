package ttft

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"kvwin/cmd/kvwin/bench/svgplot"
)

// chromium returns the path of a Chromium binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The acceptance test of ttft.svg: it renders in headless Chromium, and
// the screenshot shows one line per policy, each in its own colour. A line
// is told from its legend swatch (24 px wide) by its extent: its colour
// must cover many pixels spread over most of the plot's width.
func TestSVGRendersInHeadlessChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (apt-get install -y chromium); CI must run this test")
		}
		t.Skip("chromium is not installed (apt-get install -y chromium); set CI to make this a failure")
	}
	dir := t.TempDir()
	svgPath := filepath.Join(dir, "ttft.svg")
	shot := filepath.Join(dir, "shot.png")
	var buf bytes.Buffer
	if err := WriteSVG(&buf, reportOf(Policies(), 40), 2048); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(svgPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--force-device-scale-factor=1", "--user-data-dir="+t.TempDir(),
		"--screenshot="+shot, fmt.Sprintf("--window-size=%d,%d", svgplot.Width, svgplot.Height), "file://"+svgPath)
	cmd.Env = append(os.Environ(), "HOME="+dir) // Chromium writes caches under HOME
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < svgplot.Width/2 || b.Dy() < svgplot.Height/2 {
		t.Fatalf("screenshot is %v", b)
	}
	for _, p := range Policies() {
		pixels, columns := coverage(img, policyColours[p])
		t.Logf("%-12s %s: %5d pixels over %3d columns", p, policyColours[p], pixels, columns)
		if pixels < 300 || columns < (svgplot.Right-svgplot.Left)/2 {
			t.Errorf("policy %s (%s): %d pixels over %d columns; want a line across the plot (≥ 300 pixels, ≥ %d columns)",
				p, policyColours[p], pixels, columns, (svgplot.Right-svgplot.Left)/2)
		}
	}
}

// coverage counts the pixels of img within a small distance of colour
// (#rrggbb; anti-aliased edges blend with the background and do not
// count) and the distinct columns they fall in.
func coverage(img image.Image, colour string) (pixels, columns int) {
	v, _ := strconv.ParseUint(colour[1:], 16, 32)
	want := [3]int{int(v >> 16 & 0xff), int(v >> 8 & 0xff), int(v & 0xff)}
	const tolerance = 24 // per channel, of 255
	cols := map[int]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			got := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			near := true
			for i := range got {
				if d := got[i] - want[i]; d > tolerance || d < -tolerance {
					near = false
				}
			}
			if near {
				pixels++
				cols[x] = true
			}
		}
	}
	return pixels, len(cols)
}
