package bench

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/duplextest"
	"github.com/compactd/compactd/internal/fakeupstream"
	"github.com/compactd/compactd/internal/handoff"
)

// TestNginxConfig checks the generated configuration carries every choice the nginx column
// depends on, and, where nginx is installed, that nginx itself accepts it (nginx -t).
func TestNginxConfig(t *testing.T) {
	dir := t.TempDir()
	conf := nginxConfig(dir, "127.0.0.1:18080", "127.0.0.1:19090")
	for _, want := range []string{
		"daemon off;", "master_process on;", "worker_processes auto;",
		"pid " + dir + "/nginx.pid;", "client_body_temp_path " + dir + "/client_body;",
		"listen 127.0.0.1:18080;", "server 127.0.0.1:19090;", "keepalive 128;",
		"proxy_http_version 1.1;", `proxy_set_header Connection "";`,
		"proxy_request_buffering off;", "proxy_buffering off;", "client_max_body_size 64m;",
		"access_log /dev/stderr;", "keepalive_requests 1000000;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Log("no nginx in PATH: config not validated by nginx -t")
		return
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
		t.Errorf("nginx -t: %v\n%s", err, out)
	}
}

// TestStartNginx: a --nginx that is not there leaves the column "not run" without failing; a
// real nginx proxies to the upstream, its CPU is that of its master and workers, and stop leaves
// none of them running.
func TestStartNginx(t *testing.T) {
	fake := fakeupstream.New(fakeupstream.Options{DropBodies: true})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	up, stopFake, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stopFake()
	real, lookErr := exec.LookPath("nginx")
	for _, tc := range []struct {
		name, bin string
		runs      bool
	}{
		{"bogus path", filepath.Join(t.TempDir(), "no-such-nginx"), false},
		{"not an nginx", "/bin/false", false},
		{"nginx in PATH", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.runs && lookErr != nil {
				t.Skip("no nginx in PATH")
			}
			n, note := startNginx(t.Context(), tc.bin, up)
			if !tc.runs {
				if n != nil || !strings.HasPrefix(note, "not run: ") {
					t.Fatalf("startNginx(%q) = %v, %q; want nil, not run", tc.bin, n, note)
				}
				return
			}
			if n == nil {
				t.Fatalf("startNginx(%s): %s", real, note)
			}
			master := n.pid()
			workers := childPIDs(master)
			if len(workers) == 0 {
				n.stop()
				t.Fatalf("no workers under master %d (%s)", master, note)
			}
			client := newClient(4)
			for range 20 {
				if status, body := get(t.Context(), client, "http://"+n.addr+"/v1/models"); status != http.StatusOK || !bytes.Equal(body, fakeupstream.ModelsList()) {
					t.Errorf("GET through nginx: %d %s", status, body)
				}
			}
			client.CloseIdleConnections()
			// The kernel's own list of the master's children, where it keeps one, is the workers.
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(master) + "/task/" + strconv.Itoa(master) + "/children"); err == nil {
				var kids []int
				for _, f := range strings.Fields(string(b)) {
					k, _ := strconv.Atoi(f)
					kids = append(kids, k)
				}
				slices.Sort(kids)
				if got := slices.Sorted(slices.Values(workers)); !slices.Equal(got, kids) {
					t.Errorf("childPIDs = %v, the kernel says %v", got, kids)
				}
			}
			// What cpu() sums: the master and every worker, no other process.
			pids := n.pids()
			if len(pids) != 1+len(workers) || pids[0] != master {
				t.Errorf("pids() = %v, want master %d and workers %v", pids, master, workers)
			}
			for _, w := range workers {
				if !slices.Contains(pids, w) {
					t.Errorf("worker %d not in pids() %v", w, pids)
				}
				if b, _ := os.ReadFile("/proc/" + strconv.Itoa(w) + "/cmdline"); !strings.Contains(string(b), "nginx: worker process") {
					t.Errorf("child %d of the master is %q, not a worker", w, b)
				}
			}
			n.stop()
			for _, p := range append(workers, master) {
				if _, alive := procPPID(p); alive {
					if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline"); strings.Contains(string(b), "nginx") {
						t.Errorf("nginx process %d still running after stop", p)
					}
				}
			}
			if _, err := os.Stat(n.dir); !os.IsNotExist(err) {
				t.Errorf("nginx dir %s left behind: %v", n.dir, err)
			}
		})
	}
}

// TestRecallFound: the recall row's check accepts only a forwarded body with the handoff and a
// recall tool and without the compaction item.
func TestRecallFound(t *testing.T) {
	text := `{"type":"message","role":"user","content":[{"type":"input_text","text":"` + strings.ReplaceAll(handoff.Prefix, "\n", `\n`) + `summary"}]}`
	tool := `{"type":"function","name":"compactd_recall","parameters":{}}`
	other := `{"type":"function","name":"shell","parameters":{}}`
	item := `{"type":"compaction","encrypted_content":"x"}`
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"handoff and tool", `{"input":[` + text + `],"tools":[` + other + `,` + tool + `]}`, ""},
		{"no tool", `{"input":[` + text + `],"tools":[` + other + `]}`, "no recall tool"},
		{"no tools at all", `{"input":[` + text + `]}`, "no recall tool"},
		{"no handoff", `{"input":[{"type":"message","role":"user","content":"hi"}],"tools":[` + tool + `]}`, "no handoff"},
		{"item still there", `{"input":[` + item + `,` + text + `],"tools":[` + tool + `]}`, "compaction item"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := recallFound([]byte(tc.body))
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(got, `"compactd_recall"`) {
					t.Errorf("recallFound = %q, %v; want the tool named", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("recallFound err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestSideMarkdown renders a report with and without the nginx column: the tables keep their
// shape, nginx's cells say "not run" when it did not, and the stretch verdict is neither met nor
// missed then, and computed from the cells when it ran.
func TestSideMarkdown(t *testing.T) {
	us := time.Microsecond
	cells := func(nginx bool) []SideCell {
		c := []SideCell{{Target: SideDirect, RPS: 100, P50: 100 * us}, {Target: SideBare, RPS: 90, P50: 150 * us, CPUPerReq: 100 * us},
			{Target: SideCompactd, RPS: 95, P50: 140 * us, CPUPerReq: 90 * us}}
		if nginx {
			c = append(c, SideCell{Target: SideNginx, RPS: 99, P50: 110 * us, CPUPerReq: 40 * us})
		}
		return c
	}
	for _, tc := range []struct {
		name        string
		nginx       bool
		want, avoid []string
		stretch     Verdict
	}{
		{"without nginx", false, []string{"nginx: not run: no nginx in PATH", "| not run |", "| 0/0/not run/0 |"}, nil,
			Verdict{Figure: "nginx not run", NotRun: true}},
		{"with nginx", true, []string{"| 99 |", "| 40µs |", "| 2.25 |", "| 0/0/0/0 |"}, []string{"not run"},
			Verdict{Figure: "2.25× nginx's CPU/req (90µs vs 40µs)", Met: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &SideReport{Options: SideQuick(), Targets: slices3(tc.nginx), Nginx: "not run: no nginx in PATH",
				LoadStart: LoadAvg{1, 2, 3}, LoadEnd: LoadAvg{-1, -1, -1},
				Rows: []SideRow{{Name: "Responses 2KB", Conc: 32, Cells: cells(tc.nginx), LoadStart: 1.5, LoadEnd: 2}}}
			if tc.nginx {
				r.Nginx = "nginx/1.22.1, master_process on"
			}
			var buf bytes.Buffer
			r.Markdown(&buf)
			md := buf.String()
			CheckTables(t, md, 2)
			for _, w := range append(tc.want, "1.00, 2.00, 3.00 at start, unknown at end", "| 1.50→2.00 |") {
				if !strings.Contains(md, w) {
					t.Errorf("report lacks %q:\n%s", w, md)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(md, a) {
					t.Errorf("report has %q:\n%s", a, md)
				}
			}
			var stretch *Verdict
			for _, v := range r.Verdicts() {
				if strings.Contains(v.Target, "(stretch)") {
					stretch = &v
				}
			}
			if stretch == nil || stretch.Figure != tc.stretch.Figure || stretch.Met != tc.stretch.Met || stretch.NotRun != tc.stretch.NotRun {
				t.Errorf("stretch verdict %+v, want %+v", stretch, tc.stretch)
			}
		})
	}
}

func slices3(nginx bool) []string {
	t := []string{SideDirect, SideBare, SideCompactd}
	if nginx {
		t = append(t, SideNginx)
	}
	return t
}

// TestBareProxyStreams: the floor relays a response that starts while the request body still
// streams (full duplex). Without it, the server drains or closes the request body when
// ReverseProxy flushes the SSE headers: here, where the client sends the second half of its body
// only once it has the headers, that deadlocks (the guard's deadline fails the test); in the
// side-by-side run the transport's last read of an already-sent body failed on the closed body
// and cut the upstream connection mid-stream (golang/go#40747), about one 128 KB SSE request in
// thirty ("unexpected EOF"), which the floor's figures then left out.
func TestBareProxyStreams(t *testing.T) {
	const half = 64 << 10
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: duplextest.Upstream()}
	go func() { _ = upstream.Serve(upLn) }()
	defer upstream.Close()
	u, _ := url.Parse("http://" + upLn.Addr().String())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: bareProxy(u)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a guard against a hang, not a measurement
	defer cancel()
	client := newClient(1)
	defer client.CloseIdleConnections()
	_, got, err := duplextest.Post(ctx, client, "http://"+ln.Addr().String()+"/v1/responses", half)
	if want := duplextest.Done(2 * half); err != nil || !bytes.Contains(got, []byte(want)) {
		t.Errorf("stream through the bare proxy: %q, %v; want the event %s", got, err, want)
	}
}

// TestSideMarkdownHugeOnly: a --huge-only run has no latency rows, so no empty latency table and
// no mention of the processes it did not start.
func TestSideMarkdownHugeOnly(t *testing.T) {
	r := &SideReport{Options: SideQuick(), Targets: slices3(false), Nginx: "not run: --huge-only (nginx has no peak-RSS row)",
		Huge: []HugeResult{{Target: SideCompactd, Route: "/v1/messages", Conc: 4, Size: 1 << 20, Budget: 4 << 20, RSSBefore: 1 << 20, RSSPeak: 2 << 20, Served: 3, Refused: 1},
			{Target: SideCompactd, Route: "/v1/chat/completions", Conc: 4, Size: 1 << 20, Budget: 4 << 20, RSSBefore: 1 << 20, RSSPeak: 200 << 20, Served: 3, Bad: 1, Other: map[string]int{"502": 1}}}}
	var buf bytes.Buffer
	r.Markdown(&buf)
	md := buf.String()
	CheckTables(t, md, 2)
	for _, want := range []string{"| 4 × 1MB | /v1/messages | compactd | 4.0 MB | 1.0 MB | 2.0 MB | 104.0 MB | 3 | 1 | 0 |",
		"| 1 map[502:1] |", "4 × 1MB on /v1/messages: peak RSS ≤ budget + 100 MiB, every request served or refused in dialect | peak 2.0 MB (limit 104.0 MB), 3 served, 1 refused, 0 other | yes |",
		"4 × 1MB on /v1/chat/completions: peak RSS ≤ budget + 100 MiB, every request served or refused in dialect | peak 200.0 MB (limit 104.0 MB), 3 served, 0 refused, 1 other | **no** |"} {
		if !strings.Contains(md, want) {
			t.Errorf("huge-only report lacks %q:\n%s", want, md)
		}
	}
	for _, avoid := range []string{"| path | conns |", "second compactd serve", "nginx (master and workers)", "Recall row"} {
		if strings.Contains(md, avoid) {
			t.Errorf("huge-only report has %q:\n%s", avoid, md)
		}
	}
}

// TestProcCPUCountsThisProcess: the nanosecond sum over threads moves with CPU burned and agrees
// with the tick count of /proc/PID/stat.
func TestProcCPUCountsThisProcess(t *testing.T) {
	if _, ok := schedCPU(os.Getpid()); !ok {
		t.Skip("no /proc/PID/task/*/schedstat here")
	}
	before := procCPU(os.Getpid())
	x := 0
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		x++
	}
	_ = x
	used := procCPU(os.Getpid()) - before
	if used < 100*time.Millisecond || used > 2*time.Second {
		t.Errorf("burned ~200 ms of CPU, procCPU moved %v", used)
	}
	if d := procCPU(os.Getpid()) - statCPU(os.Getpid()); d < -100*time.Millisecond || d > 100*time.Millisecond {
		t.Errorf("schedstat sum and stat ticks differ by %v", d)
	}
}

// TestPairedAdded: the added latency is taken request by request (a failed request, 0, left
// out), median per round, median over rounds; TTFB when asked.
func TestPairedAdded(t *testing.T) {
	ms := time.Millisecond
	base := []roundResult{
		{byIndex: []time.Duration{10 * ms, 30 * ms, 20 * ms, 0}, ttfbByIndex: []time.Duration{5 * ms, 5 * ms, 5 * ms, 5 * ms}},
		{byIndex: []time.Duration{10 * ms, 10 * ms, 10 * ms}, ttfbByIndex: []time.Duration{1 * ms, 1 * ms, 1 * ms}},
		{byIndex: []time.Duration{50 * ms}, ttfbByIndex: []time.Duration{1 * ms}},
	}
	tgt := []roundResult{
		{byIndex: []time.Duration{11 * ms, 31 * ms, 21 * ms, 99 * ms}, ttfbByIndex: []time.Duration{6 * ms, 7 * ms, 8 * ms, 9 * ms}},
		{byIndex: []time.Duration{12 * ms, 12 * ms, 0}, ttfbByIndex: []time.Duration{2 * ms, 2 * ms, 2 * ms}},
		{byIndex: []time.Duration{45 * ms}, ttfbByIndex: []time.Duration{1 * ms}},
	}
	for _, tc := range []struct {
		ttfb bool
		want time.Duration
	}{{false, 1 * ms}, {true, 1 * ms}} {
		// rounds: lat +1, +2, -5 → median +1; ttfb medians: +2.5 (1,2,3,4), +1, 0 → +1
		got, ok := pairedAdded(tgt, base, tc.ttfb)
		if !ok || got != tc.want {
			t.Errorf("ttfb=%v: pairedAdded = %v, %v; want %v", tc.ttfb, got, ok, tc.want)
		}
	}
	if _, ok := pairedAdded(nil, base, false); ok {
		t.Error("no rounds: measured")
	}
}
