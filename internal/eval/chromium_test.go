package eval

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// chromium finds Debian's headless-capable Chromium.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestEvalHTMLScreenshot renders the HTML report of a real (CI-sized) run in headless Chromium
// and checks the screenshot: not blank, and every configuration's series colour is drawn. It
// skips only when Chromium is missing outside CI; under CI=true it must run.
func TestEvalHTMLScreenshot(t *testing.T) {
	bin := chromium()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (apt-get install chromium); CI must run this test")
		}
		t.Skip("chromium not installed")
	}
	rep, err := Run(context.Background(), ciConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	shot := filepath.Join(dir, "out.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=1200,900", "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	pf, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer pf.Close()
	img, err := png.Decode(pf)
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("EVAL_SCREENSHOT"); keep != "" { // to look at it
		b, _ := os.ReadFile(shot)
		_ = os.WriteFile(keep, b, 0o644)
	}
	counts, distinct := colourCounts(img)
	if distinct < 20 {
		t.Fatalf("screenshot looks blank: %d distinct colours", distinct)
	}
	for i, c := range SeriesColors[:len(rep.Rows)] {
		// A 4-unit polyline plus its markers and legend swatch: hundreds of pixels at least.
		if n := counts[i]; n < 300 {
			t.Errorf("series (%s) colour %s: %d pixels in the screenshot, want the chart's line", rep.Rows[i].Variant.Name, c, n)
		}
	}
}

// colourCounts counts pixels within a small distance of each series colour, and the distinct
// colours of the image.
func colourCounts(img image.Image) ([]int, int) {
	type rgb struct{ r, g, b int }
	want := make([]rgb, len(SeriesColors))
	for i, c := range SeriesColors {
		v, _ := strconv.ParseUint(c[1:], 16, 32)
		want[i] = rgb{int(v >> 16), int(v >> 8 & 0xff), int(v & 0xff)}
	}
	counts := make([]int, len(want))
	seen := map[rgb]bool{}
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			p := rgb{int(r >> 8), int(g >> 8), int(b >> 8)}
			if len(seen) < 1000 {
				seen[p] = true
			}
			for i, w := range want {
				if abs(p.r-w.r)+abs(p.g-w.g)+abs(p.b-w.b) <= 12 {
					counts[i]++
				}
			}
		}
	}
	return counts, len(seen)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
