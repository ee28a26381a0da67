package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/bench/workload"
	"github.com/compactd/compactd/internal/crypto"
)

// The side-by-side benchmark (`compactd bench side-by-side`): compactd, a bare
// httputil.ReverseProxy and the fake upstream directly, each its own process, so that a proxy's
// CPU per request can be read from /proc/PID (its threads' schedstat) of that process alone and its peak RSS from
// /proc/PID/status, with nothing of the load generator or the upstream in either figure. The
// load comes from this (the bench) process. Each row runs Rounds rounds, the targets in a
// rotating order within each round, and reports medians over the rounds: on a shared machine
// that interleaving spreads drifts in background load over all targets alike.

// SideOptions sets the size of a side-by-side run.
type SideOptions struct {
	Binary string // the compactd executable to spawn (serve, fake-upstream, bench bare-proxy)
	// ServeBinary, when set, is the compactd whose serve is measured (e.g. an older build, for a
	// before/after in one harness); Binary still provides the fake upstream and the bare proxy.
	ServeBinary string
	// ServeArgs are extra flags for compactd serve (e.g. --memory-limit).
	ServeArgs []string
	// HugeOnly skips the latency rows and runs the peak-RSS rows alone.
	HugeOnly bool
	Duration time.Duration // one target's share of one round of one row
	Rounds   int

	Small, Large int // body sizes of the small (2 KB) and large (2 MB) rows
	Huge         int // body size of the peak-RSS rows (20 MB)
	HugeConc     []int
	// HugeRoutes are the routes of the peak-RSS rows (default HugeRoutes: every route compactd
	// parses).
	HugeRoutes []string
	// InflightBudget is compactd's --max-inflight-body-bytes in the run (0 leaves serve's
	// default, which the report reads from serve's startup log).
	InflightBudget int64
	// Rows, when set, runs only the rows whose names it matches ("growing": the growing
	// conversations).
	Rows *regexp.Regexp
	// Nginx is the nginx executable of the optional nginx column: "" looks nginx up in PATH.
	// When there is none, or it does not start, the column says "not run" and the run goes on.
	Nginx string
	// StoreForward adds the store-and-forward reference (proxy.StoreAndForward: compactd's body
	// read and upstream write with nothing between) as a target, reported in a table of its own.
	StoreForward bool
}

// SideDefaults is the full run for BENCHMARKS.md (about five minutes on two cores).
func SideDefaults() SideOptions {
	return SideOptions{Duration: 2 * time.Second, Rounds: 5, Small: 2 << 10, Large: 2 << 20, Huge: 20 << 20, HugeConc: []int{50, 100}, HugeRoutes: HugeRoutes}
}

// SideQuick is a CI-sized run: every row, small numbers, a few seconds. Its budget (4 MiB, and
// bodies bounded by it) is small enough that 8 bodies of 1 MiB go past it on every route.
func SideQuick() SideOptions {
	return SideOptions{Duration: 100 * time.Millisecond, Rounds: 2, Small: 2 << 10, Large: 128 << 10, Huge: 1 << 20, HugeConc: []int{8}, HugeRoutes: HugeRoutes, InflightBudget: 4 << 20}
}

// HugeRoutes are the routes whose bodies compactd reads whole (under its in-flight budget).
var HugeRoutes = []string{"/v1/responses", "/v1/responses/compact", "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions"}

// hugeBody is a request of about size bytes for route: the workload's agent session in the
// route's dialect.
func hugeBody(route string, size int) []byte {
	switch route {
	case "/v1/messages":
		return workload.MessagesRequest(size)
	case "/v1/messages/count_tokens":
		return workload.CountTokensRequest(size)
	case "/v1/chat/completions":
		return workload.ChatRequest(size)
	}
	return workload.Request(size, workload.BodyOptions{})
}

// Side-by-side target names.
const (
	SideDirect   = "direct"
	SideBare     = "bare proxy"
	SideCompactd = "compactd"
	SideNginx    = "nginx"
	// SideStoreForward is the optional store-and-forward reference (SideOptions.StoreForward).
	SideStoreForward = "store-and-forward"
)

// sideTargets are the targets every run has, in cell order; nginx, when it runs, comes last.
var sideTargets = []string{SideDirect, SideBare, SideCompactd}

// SideCell is one target in one row: medians over the rounds.
type SideCell struct {
	Target               string
	RPS                  float64
	P50, P99, TTFB50     time.Duration
	CPUPerReq            time.Duration // the proxy process's CPU / requests (0 for direct)
	Requests, Errors     int
	RoundsRPS, RoundsCPU []float64 // per round, for the curious
	// PairedAdded is, on a growing row with one connection, this target's latency (time to
	// first byte on an SSE row) minus the bare proxy's for the same request, median over the
	// requests of a round, median over rounds; Paired says it was measured. The bodies are the
	// same request by request, so what the upstream's time varies with cancels out.
	PairedAdded time.Duration `json:",omitempty"`
	Paired      bool          `json:",omitempty"`
}

// SideRow is one row of the table.
type SideRow struct {
	Name  string
	Conc  int
	Cells []SideCell // in SideReport.Targets order
	// LoadStart and LoadEnd are the 1-minute load average when the row started and ended: on a
	// shared machine they say which rows ran on a busy one.
	LoadStart, LoadEnd float64
}

// Cell is the row's cell of target (ok false: the target did not run).
func (r SideRow) Cell(target string) (SideCell, bool) {
	for _, c := range r.Cells {
		if c.Target == target {
			return c, true
		}
	}
	return SideCell{Target: target}, false
}

// HugeResult is one peak-RSS row: Conc concurrent Size bodies at once on Route through a proxy,
// a process of its own started for the row.
type HugeResult struct {
	Target     string
	Route      string
	Conc, Size int
	// Budget is compactd's in-flight body budget in the row (from its startup log).
	Budget int64
	// RSSBefore is the process's resident set once it listened; RSSPeak its high-water mark
	// (VmHWM) when every request had been answered.
	RSSBefore, RSSPeak   int64
	Served, Refused, Bad int // 200; 503 with Retry-After in the route's dialect; anything else
	// Other counts the Bad answers by status ("error" when the request failed).
	Other map[string]int
}

// SideReport is the outcome of RunSideBySide.
type SideReport struct {
	Machine Machine
	Options SideOptions
	// Uptime load averages (1, 5, 15 minutes) when the run started and ended.
	LoadStart, LoadEnd LoadAvg
	Targets            []string // the targets measured, in cell order
	// Nginx says how the nginx column was run ("not run: …" when it was not).
	Nginx string
	// RecallCheck is what the check request before the recall row found in the body the
	// upstream received.
	RecallCheck string
	Rows        []SideRow
	Huge        []HugeResult
	// Budget is the in-flight body budget of the compactd the latency rows measured (its startup
	// log's).
	Budget int64
}

// NginxRan reports whether the run has an nginx column with figures in it.
func (r *SideReport) NginxRan() bool { return slices.Contains(r.Targets, SideNginx) }

// proc is one spawned process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	// startup is what it logged up to its "listening" line.
	startup []string
}

// logged is the value of key=value in the process's startup log (its last mention), "" if none.
func (p *proc) logged(key string) string {
	v := ""
	for _, line := range p.startup {
		if _, rest, ok := strings.Cut(line, " "+key+"="); ok {
			v, _, _ = strings.Cut(rest, " ")
		}
	}
	return strings.Trim(v, `"`)
}

// startProc starts bin args and waits for its "listening" log line, whose addr= is its address.
func startProc(ctx context.Context, bin string, env []string, args ...string) (*proc, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var tail []string
		for sc.Scan() {
			line := sc.Text()
			if p.addr == "" {
				tail = append(tail, line)
				p.startup = tail
				if strings.Contains(line, "listening") {
					if _, a, ok := strings.Cut(line, "addr="); ok {
						a, _, _ = strings.Cut(a, " ")
						p.addr = strings.Trim(a, `"`)
						addrc <- p.addr
					}
				}
			}
		}
		if p.addr == "" {
			addrc <- "!" + strings.Join(tail, "\n")
		}
		_ = cmd.Wait()
	}()
	select {
	case a := <-addrc:
		if strings.HasPrefix(a, "!") {
			return nil, fmt.Errorf("%s %s exited before listening:\n%s", bin, strings.Join(args, " "), a[1:])
		}
		return p, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s %s did not start listening", bin, args[0])
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// procCPU is a process's CPU time: the sum of its threads' time on a CPU in nanoseconds
// (/proc/PID/task/*/schedstat), or, where that is unavailable, user+system time from
// /proc/PID/stat, which counts in 10 ms ticks — a round of 40 requests of 2 MB measured by ticks
// was ±0.25 ms per request, a quarter of what the growing rows' targets allow. A thread that
// has exited drops out of the sum; the processes measured here (Go servers, nginx's
// single-threaded workers) keep theirs.
func procCPU(pid int) time.Duration {
	if d, ok := schedCPU(pid); ok {
		return d
	}
	return statCPU(pid)
}

func schedCPU(pid int) (time.Duration, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread has just exited
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			return 0, false
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		sum += ns
	}
	return time.Duration(sum), true
}

func statCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of stat
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	const clkTck = 100                       // USER_HZ: 100 on every Linux port Go supports
	return time.Duration(ut+st) * time.Second / clkTck
}

// procRSS is a process's resident set size from /proc/PID/status.
func procRSS(pid int) int64 { return procStatus(pid, "VmRSS:") }

// procPeakRSS is a process's high-water mark of resident set size (VmHWM): its peak RSS since it
// started, which no sampling can miss.
func procPeakRSS(pid int) int64 { return procStatus(pid, "VmHWM:") }

func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sideEnv is the processes of a run: the fake upstream, the bare proxy, compactd, and the
// optional nginx and compactd with an archive (the recall row's).
type sideEnv struct {
	fake, bare, cd *proc
	sf             *proc // the store-and-forward reference, when the run has it
	cdRecall       *proc // compactd with an archive, for the recall row alone
	nginx          *nginxProc
	env            []string // the environment of the spawned compactd processes, key included
	serveBin       string
	serveArgs      func(upstream, dataDir, archive string) []string
}

func (e *sideEnv) close() {
	if e.nginx != nil {
		e.nginx.stop()
	}
	for _, p := range []*proc{e.cdRecall, e.cd, e.sf, e.bare, e.fake} {
		if p != nil {
			p.stop()
		}
	}
}

// compactd is the compactd process a case measures.
func (e *sideEnv) compactd(c *sideCase) *proc {
	if c != nil && c.recall {
		return e.cdRecall
	}
	return e.cd
}

func (e *sideEnv) url(target string, c *sideCase) string {
	switch target {
	case SideBare:
		return "http://" + e.bare.addr
	case SideCompactd:
		return "http://" + e.compactd(c).addr
	case SideNginx:
		return "http://" + e.nginx.addr
	case SideStoreForward:
		return "http://" + e.sf.addr
	}
	return "http://" + e.fake.addr
}

// proxyCPU reads the CPU time so far of the processes a target's requests cost beyond going
// direct: nil for direct; for nginx its master and every worker.
func (e *sideEnv) proxyCPU(target string, c *sideCase) func() time.Duration {
	switch target {
	case SideBare, SideCompactd, SideStoreForward:
		p := e.bare
		switch target {
		case SideCompactd:
			p = e.compactd(c)
		case SideStoreForward:
			p = e.sf
		}
		return func() time.Duration { return procCPU(p.pid()) }
	case SideNginx:
		return e.nginx.cpu
	}
	return nil
}

func startSideEnv(ctx context.Context, o SideOptions, dataDir string) (*sideEnv, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMPACTD_") {
			env = append(env, kv)
		}
	}
	e := &sideEnv{}
	var err error
	if e.fake, err = startProc(ctx, o.Binary, env, "fake-upstream", "--listen", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	up := "http://" + e.fake.addr
	if e.bare, err = startProc(ctx, o.Binary, env, "bench", "bare-proxy", "--listen", "127.0.0.1:0", "--upstream", up); err != nil {
		e.close()
		return nil, err
	}
	if o.StoreForward && !o.HugeOnly {
		if e.sf, err = startProc(ctx, o.Binary, env, "bench", "store-forward-proxy", "--listen", "127.0.0.1:0", "--upstream", up); err != nil {
			e.close()
			return nil, err
		}
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		e.close()
		return nil, err
	}
	// compactd as a user runs it: observability on (metrics, the access log at info), the
	// default memory settings but for the budget, which the report names. The archive is off
	// but for the recall row's process (startRecall), so that no other row pays for it.
	e.serveArgs = func(upstream, dataDir, archive string) []string {
		args := []string{"serve", "--listen", "127.0.0.1:0", "--upstream", upstream, "--anthropic-upstream", upstream,
			"--data-dir", dataDir, "--archive", archive, "--log-format", "text"}
		if o.InflightBudget > 0 {
			args = append(args, "--max-inflight-body-bytes", strconv.FormatInt(o.InflightBudget, 10))
			if o.InflightBudget < 32<<20 {
				// A budget below serve's default body limit (the --quick run's) would be refused:
				// no body over the budget could ever be served. Bodies are bounded by it instead.
				args = append(args, "--max-body-bytes", strconv.FormatInt(o.InflightBudget, 10))
			}
		}
		return append(args, o.ServeArgs...)
	}
	e.serveBin = o.Binary
	if o.ServeBinary != "" {
		e.serveBin = o.ServeBinary
	}
	e.env = append(env, "COMPACTD_KEYS="+key.String())
	if e.cd, err = startProc(ctx, e.serveBin, e.env, e.serveArgs(up, dataDir, "off")...); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// sideCase is one row's requests: per target, the body (nil: GET).
type sideCase struct {
	name   string
	method string
	path   string
	conc   int
	bodies map[string][]byte
	ttfb   bool // the row's figure is time to first byte
	recall bool // compactd's cell is served by the compactd with an archive (the recall tool)
	// grow, when set, makes each target's bodies: growing conversations (workload.Grower),
	// the same sequence for every target in a round, so the row measures what agents send.
	grow *growing
}

// growingBodies are conversations of d that grow from from to past to bytes, convs of them at
// once (request i goes to conversation i mod convs, so a conversation's next request follows
// its last one's answer whenever convs exceeds the connections). lead is put first in compactd's
// conversations alone (a compaction item: the others get the same history without it, as the
// handoff row).
func growingBodies(d workload.Dialect, from, to, convs int, stream bool, lead []byte) *growing {
	mk := func(lead []byte) []*workload.Grower {
		o := workload.GrowOptions{From: from, To: to, Stream: stream}
		if lead != nil {
			o.Lead = [][]byte{lead}
		}
		gs := make([]*workload.Grower, convs)
		for i := range gs {
			gs[i] = workload.NewGrower(d, i+1, o)
		}
		return gs
	}
	g := &growing{plain: mk(nil)}
	if lead != nil {
		g.lead = mk(lead)
	}
	return g
}

// growing is a growing row's conversations at the start of its next round. Each target's round
// is sent clones of them, so every target gets the same bodies in the same order; the round's
// conversations then go on from where it ended (advance), the way an agent's do, so compactd
// meets most of them again, and a few are new.
type growing struct {
	plain []*workload.Grower
	lead  []*workload.Grower // compactd's, when its conversations carry a lead item
}

// bodies are target's bodies for one round (or the warm-up), from clones of the present state.
func (g *growing) bodies(target string) func(int) []byte {
	src := g.plain
	if g.lead != nil && target == SideCompactd {
		src = g.lead
	}
	gs := make([]*workload.Grower, len(src))
	for i, c := range src {
		gs[i] = c.Clone()
	}
	var n atomic.Int64
	return func(int) []byte { return gs[int(n.Add(1)-1)%len(gs)].Next() }
}

// advance moves the conversations on by the n requests a round sent.
func (g *growing) advance(n int) {
	for _, gs := range [][]*workload.Grower{g.plain, g.lead} {
		for i := range n {
			if len(gs) > 0 {
				gs[i%len(gs)].Advance()
			}
		}
	}
}

// compactionItem is a compaction item compactd at base issued, for the growing handoff row.
func compactionItem(ctx context.Context, base string) ([]byte, error) {
	b, err := handoffBodies(ctx, base, 64<<10)
	if err != nil {
		return nil, err
	}
	for _, it := range gjson.GetBytes(b[SideCompactd], "input").Array() {
		if it.Get("type").Str == "compaction" {
			return []byte(it.Raw), nil
		}
	}
	return nil, errors.New("compacting for the growing handoff row: compactd answered no compaction item")
}

func sameBody(b []byte) map[string][]byte {
	return map[string][]byte{SideDirect: b, SideBare: b, SideCompactd: b, SideNginx: b, SideStoreForward: b}
}

// messagesBody is an Anthropic Messages request of about size bytes.
func messagesBody(size int) []byte {
	items := workload.Items(max(size-400, 200))
	var text strings.Builder
	for _, it := range items {
		text.WriteString(gjson.GetBytes(it, "output").Str)
		text.WriteString(gjson.GetBytes(it, "content.0.text").Str)
		if text.Len() >= size-400 {
			break
		}
	}
	s := text.String()
	s = s[:min(len(s), max(size-400, 0))]
	b, _ := json.Marshal(map[string]any{
		"model": "claude-sonnet-5-5", "max_tokens": 1024,
		"messages": []map[string]any{{"role": "user", "content": s}},
	})
	return b
}

// handoffBodies are the 2 MB history behind a compaction item for compactd (the one at base),
// which opens it and forwards the handoff in its place, and the same history without the item for
// the others (the fake upstream, like any backend without compaction, refuses the item): what
// reaches the upstream is comparable in size.
func handoffBodies(ctx context.Context, base string, size int) (map[string][]byte, error) {
	small := workload.Request(8<<10, workload.BodyOptions{})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/responses/compact", bytes.NewReader(small))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("compacting for the handoff row: %d %s", resp.StatusCode, out)
	}
	var prefix [][]byte
	for _, it := range gjson.GetBytes(out, "output").Array() {
		prefix = append(prefix, []byte(it.Raw))
	}
	hist := workload.Items(size - 1200)
	with := workload.Body(append(prefix, hist...), workload.BodyOptions{})
	without := workload.Body(hist, workload.BodyOptions{})
	return map[string][]byte{SideDirect: without, SideBare: without, SideNginx: without, SideStoreForward: without, SideCompactd: with}, nil
}

// RunSideBySide performs a whole side-by-side run.
func RunSideBySide(ctx context.Context, o SideOptions, progress io.Writer) (*SideReport, error) {
	if progress == nil {
		progress = io.Discard
	}
	if o.Binary == "" {
		return nil, errors.New("side-by-side: no compactd binary to spawn")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return nil, errors.New("side-by-side needs /proc (Linux): CPU and RSS are read from it")
	}
	dir, err := os.MkdirTemp("", "compactd-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rep := &SideReport{Machine: machine(), Options: o, LoadStart: uptimeLoad(), Targets: slices.Clone(sideTargets)}
	e, err := startSideEnv(ctx, o, dir)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if e.sf != nil {
		rep.Targets = append(rep.Targets, SideStoreForward)
	}
	rep.Budget, _ = strconv.ParseInt(e.cd.logged("max_inflight_body_bytes"), 10, 64)
	if o.HugeOnly {
		rep.Nginx = "not run: --huge-only (nginx has no peak-RSS row)"
	} else if e.nginx, rep.Nginx = startNginx(ctx, o.Nginx, "http://"+e.fake.addr); e.nginx != nil {
		rep.Targets = append(rep.Targets, SideNginx)
	}
	fmt.Fprintf(progress, "nginx: %s\n", rep.Nginx)

	small := workload.Request(o.Small, workload.BodyOptions{})
	large := workload.Request(o.Large, workload.BodyOptions{})
	largeSSE := workload.Request(o.Large, workload.BodyOptions{Stream: true})
	handoff, err := handoffBodies(ctx, e.url(SideCompactd, nil), o.Large)
	if err != nil {
		return nil, err
	}
	var recall map[string][]byte
	if !o.HugeOnly {
		if recall, rep.RecallCheck, err = e.startRecall(ctx, dir, o.Large); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "recall row check: %s\n", rep.RecallCheck)
	}
	cases := []sideCase{
		{name: "Responses " + sizeName(o.Small), method: "POST", path: "/v1/responses", conc: 32, bodies: sameBody(small)},
		{name: "Responses " + sizeName(o.Small), method: "POST", path: "/v1/responses", conc: 1, bodies: sameBody(small)},
		{name: "Messages " + sizeName(o.Small), method: "POST", path: "/v1/messages", conc: 32, bodies: sameBody(messagesBody(o.Small))},
		{name: "Messages " + sizeName(o.Small), method: "POST", path: "/v1/messages", conc: 1, bodies: sameBody(messagesBody(o.Small))},
		{name: "GET /v1/models", method: "GET", path: "/v1/models", conc: 32, bodies: sameBody(nil)},
		{name: "GET /v1/models", method: "GET", path: "/v1/models", conc: 1, bodies: sameBody(nil)},
		{name: sizeName(o.Large) + " agent history", method: "POST", path: "/v1/responses", conc: 4, bodies: sameBody(large)},
		{name: sizeName(o.Large) + " agent history", method: "POST", path: "/v1/responses", conc: 1, bodies: sameBody(large)},
		{name: sizeName(o.Large) + " with a compaction item (handoff)", method: "POST", path: "/v1/responses", conc: 1, bodies: handoff},
		{name: sizeName(o.Large) + " handoff + recall tool", method: "POST", path: "/v1/responses", conc: 1, bodies: recall, recall: true},
		{name: "SSE " + sizeName(o.Large) + " request, time to first byte", method: "POST", path: "/v1/responses", conc: 1, bodies: sameBody(largeSSE), ttfb: true},
	}
	if !o.HugeOnly {
		item, err := compactionItem(ctx, e.url(SideCompactd, nil))
		if err != nil {
			return nil, err
		}
		band := func(f float64) int { return int(float64(o.Large) * f) }
		cases = append(cases,
			sideCase{name: "growing " + sizeName(o.Large) + " Responses conversations", method: "POST", path: "/v1/responses", conc: 1,
				grow: growingBodies(workload.Responses, band(0.9), band(1.1), 8, false, nil)},
			sideCase{name: "growing " + sizeName(o.Large) + " Responses conversations", method: "POST", path: "/v1/responses", conc: 4,
				grow: growingBodies(workload.Responses, band(0.9), band(1.1), 8, false, nil)},
			sideCase{name: "growing " + sizeName(o.Large) + " Messages conversations", method: "POST", path: "/v1/messages", conc: 1,
				grow: growingBodies(workload.Messages, band(0.9), band(1.1), 8, false, nil)},
			sideCase{name: "growing " + sizeName(o.Large) + " Chat conversations", method: "POST", path: "/v1/chat/completions", conc: 1,
				grow: growingBodies(workload.Chat, band(0.9), band(1.1), 8, false, nil)},
			sideCase{name: "growing " + sizeName(o.Large) + " Responses conversations after a compaction (handoff)", method: "POST", path: "/v1/responses", conc: 1,
				grow: growingBodies(workload.Responses, band(0.9), band(1.1), 8, false, item)},
			sideCase{name: "growing " + sizeName(o.Large) + " Responses conversations, SSE time to first byte", method: "POST", path: "/v1/responses", conc: 1, ttfb: true,
				grow: growingBodies(workload.Responses, band(0.9), band(1.1), 8, true, nil)},
			sideCase{name: "growing " + sizeName(o.Large/40) + "→" + sizeName(o.Large) + " Responses conversations", method: "POST", path: "/v1/responses", conc: 4,
				grow: growingBodies(workload.Responses, band(0.025), band(1), 8, false, nil)},
		)
	}
	if o.Rows != nil {
		cases = slices.DeleteFunc(cases, func(c sideCase) bool { return !o.Rows.MatchString(c.name) })
	}
	clients := map[string]*http.Client{}
	for _, t := range rep.Targets {
		clients[t] = newClient(64)
	}
	if o.HugeOnly {
		cases = nil
	}
	for i := range cases {
		c := &cases[i]
		row := SideRow{Name: c.name, Conc: c.conc, LoadStart: loadAvg()}
		reqs := map[string]*requester{}
		warm := min(300*time.Millisecond, o.Duration)
		count := 0 // a growing row's requests per round: the same for every target
		if c.grow != nil {
			c.grow.advance(len(c.grow.plain)) // begin the conversations outside the rounds
		}
		for _, t := range rep.Targets {
			body := c.bodies[t]
			bodyOf := func(int) []byte { return body }
			if c.grow != nil {
				bodyOf = c.grow.bodies(t)
			}
			reqs[t] = &requester{client: clients[t], method: c.method, url: e.url(t, c) + c.path, body: bodyOf}
			// Warm the connections, compactd's token-count cache and the allocators.
			col := &collector{}
			el := closedLoop(ctx, col, reqs[t], c.conc, warm)
			if n := int(float64(col.n) * o.Duration.Seconds() / el.Seconds()); c.grow != nil && (count == 0 || n < count) {
				count = n // what the slowest target sends in a round's duration
			}
		}
		count = max(count, 2*c.conc)
		rounds := map[string][]roundResult{}
		for r := range o.Rounds {
			for k := range rep.Targets {
				t := rep.Targets[(r+k)%len(rep.Targets)] // rotate who goes first
				if c.grow == nil {
					rounds[t] = append(rounds[t], measureRound(ctx, reqs[t], c.conc, o.Duration, 0, e.proxyCPU(t, c)))
					continue
				}
				// Every target sends the same count requests of round r's conversations: the
				// same multiset of bodies, so p50 and CPU per request compare like for like.
				reqs[t].body = c.grow.bodies(t)
				rounds[t] = append(rounds[t], measureRound(ctx, reqs[t], c.conc, 4*o.Duration, count, e.proxyCPU(t, c)))
			}
			if c.grow != nil {
				c.grow.advance(count)
			}
			if err := ctx.Err(); err != nil {
				return rep, err
			}
		}
		row.LoadEnd = loadAvg()
		for _, t := range rep.Targets {
			cell := medianCell(t, rounds[t])
			if c.grow != nil && c.conc == 1 && t != SideBare {
				cell.PairedAdded, cell.Paired = pairedAdded(rounds[t], rounds[SideBare], c.ttfb)
			}
			row.Cells = append(row.Cells, cell)
			fmt.Fprintf(progress, "%-44s c=%-3d %-10s %8.0f req/s p50 %-9v ttfb %-9v cpu/req %-9v load %.2f→%.2f\n", c.name, c.conc, t, cell.RPS, cell.P50, cell.TTFB50, cell.CPUPerReq, row.LoadStart, row.LoadEnd)
		}
		rep.Rows = append(rep.Rows, row)
	}
	for _, t := range rep.Targets {
		clients[t].CloseIdleConnections()
	}

	if rep.Huge, err = hugeRows(ctx, e, o, dir, progress); err != nil {
		return rep, err
	}
	rep.Machine.LoadEnd = loadAvg()
	rep.LoadEnd = uptimeLoad()
	return rep, ctx.Err()
}

type roundResult struct {
	byIndex, ttfbByIndex []time.Duration // latency and TTFB by request index, for a fixed count
	rps                  float64
	p50, p99             time.Duration
	ttfb50               time.Duration
	cpu                  time.Duration // per request
	n, errs              int
}

// measureRound runs one round of one target, for d or n requests (0: no limit) whichever ends
// first; cpu (nil: none) reads the CPU time of the target's processes.
func measureRound(ctx context.Context, r *requester, conc int, d time.Duration, n int, cpu func() time.Duration) roundResult {
	col := &collector{}
	var cpu0 time.Duration
	if cpu != nil {
		cpu0 = cpu()
	}
	if n > 0 {
		col.byIndex, col.ttfbByIndex = make([]time.Duration, n), make([]time.Duration, n)
	}
	elapsed := closedLoopN(ctx, col, r, conc, d, n)
	res := roundResult{n: col.n, errs: col.errs, byIndex: col.byIndex, ttfbByIndex: col.ttfbByIndex}
	ok := col.n - col.errs
	if cpu != nil && ok > 0 {
		res.cpu = (cpu() - cpu0) / time.Duration(ok)
	}
	res.rps = float64(ok) / elapsed.Seconds()
	res.p50, res.p99, res.ttfb50 = col.lat.Quantile(.5), col.lat.Quantile(.99), col.ttfb.Quantile(.5)
	return res
}

// pairedAdded is the median over rounds of the median, over the requests both targets answered,
// of t's latency minus base's (time to first byte when ttfb).
func pairedAdded(t, base []roundResult, ttfb bool) (time.Duration, bool) {
	var perRound []time.Duration
	for r := range min(len(t), len(base)) {
		var d []time.Duration
		ta, ba := t[r].byIndex, base[r].byIndex
		if ttfb {
			ta, ba = t[r].ttfbByIndex, base[r].ttfbByIndex
		}
		for i := range min(len(ta), len(ba)) {
			if a, b := ta[i], ba[i]; a > 0 && b > 0 {
				d = append(d, a-b)
			}
		}
		if len(d) > 0 {
			perRound = append(perRound, medianDur(d))
		}
	}
	if len(perRound) == 0 {
		return 0, false
	}
	return medianDur(perRound), true
}

func medianCell(target string, rs []roundResult) SideCell {
	c := SideCell{Target: target}
	var rps, cpu []float64
	var p50, p99, ttfb []time.Duration
	for _, r := range rs {
		rps, cpu = append(rps, r.rps), append(cpu, float64(r.cpu))
		p50, p99, ttfb = append(p50, r.p50), append(p99, r.p99), append(ttfb, r.ttfb50)
		c.Requests += r.n
		c.Errors += r.errs
	}
	c.RoundsRPS, c.RoundsCPU = slices.Clone(rps), slices.Clone(cpu)
	c.RPS, c.CPUPerReq = median(rps), time.Duration(median(cpu))
	c.P50, c.P99, c.TTFB50 = medianDur(p50), medianDur(p99), medianDur(ttfb)
	return c
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(v []time.Duration) time.Duration {
	f := make([]float64, len(v))
	for i, d := range v {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}

// hugeRows runs the peak-RSS rows: for each concurrency, the bare proxy on /v1/responses (the
// floor: it streams bodies through a fixed buffer), then compactd on every route of o.HugeRoutes,
// each row in a process of its own, so that its high-water mark (VmHWM) is the row's peak.
func hugeRows(ctx context.Context, e *sideEnv, o SideOptions, dir string, progress io.Writer) ([]HugeResult, error) {
	bodies := map[string][]byte{}
	for _, route := range o.HugeRoutes {
		bodies[route] = hugeBody(route, o.Huge)
	}
	var out []HugeResult
	row := 0
	for _, n := range o.HugeConc {
		targets := []struct{ target, route string }{{SideBare, "/v1/responses"}}
		for _, route := range o.HugeRoutes {
			targets = append(targets, struct{ target, route string }{SideCompactd, route})
		}
		for _, tr := range targets {
			row++
			var p *proc
			var err error
			up := "http://" + e.fake.addr
			if tr.target == SideBare {
				p, err = startProc(ctx, o.Binary, e.env, "bench", "bare-proxy", "--listen", "127.0.0.1:0", "--upstream", up)
			} else {
				p, err = startProc(ctx, e.serveBin, e.env, e.serveArgs(up, filepath.Join(dir, "huge-"+strconv.Itoa(row)), "off")...)
			}
			if err != nil {
				return out, err
			}
			res := hugeBodies(ctx, p, tr.target, tr.route, bodies[tr.route], n)
			p.stop()
			out = append(out, res)
			fmt.Fprintf(progress, "%d × %s %-26s %-10s budget %s: peak RSS %d MiB (at start %d MiB), served %d, refused %d, other %d %v; load %.2f\n",
				n, sizeName(res.Size), tr.route, tr.target, fmtBytes(res.Budget), res.RSSPeak>>20, res.RSSBefore>>20, res.Served, res.Refused, res.Bad, res.Other, loadAvg())
			if err := ctx.Err(); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// hugeBodies sends n requests with body to route at once through the process p, and reads its
// peak RSS once all are answered.
func hugeBodies(ctx context.Context, p *proc, target, route string, body []byte, n int) HugeResult {
	res := HugeResult{Target: target, Route: route, Conc: n, Size: len(body), RSSBefore: procRSS(p.pid()), Other: map[string]int{}}
	res.Budget, _ = strconv.ParseInt(p.logged("max_inflight_body_bytes"), 10, 64)
	client := newClient(n)
	defer client.CloseIdleConnections()
	anthropic := strings.HasPrefix(route, "/v1/messages")
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			status, h, respBody := postHeaders(ctx, client, "http://"+p.addr+route, body)
			refused := status == http.StatusServiceUnavailable && h.Get("Retry-After") != "" &&
				(!anthropic && gjson.GetBytes(respBody, "error.code").Str == "server_overloaded" ||
					anthropic && gjson.GetBytes(respBody, "type").Str == "error" && gjson.GetBytes(respBody, "error.type").Str == "overloaded_error")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status == http.StatusOK:
				res.Served++
			case refused:
				res.Refused++
			default:
				res.Bad++
				k := strconv.Itoa(status)
				if status == 0 {
					k = "error"
				}
				res.Other[k]++
			}
		})
	}
	wg.Wait()
	res.RSSPeak = procPeakRSS(p.pid())
	return res
}

func post(ctx context.Context, c *http.Client, url string, body []byte) (int, []byte) {
	status, _, b := postHeaders(ctx, c, url, body)
	return status, b
}

// postHeaders posts body as both SDKs would (either API's credentials and version header) and
// returns the answer's status, headers and the first MiB of its body.
func postHeaders(ctx context.Context, c *http.Client, url string, body []byte) (int, http.Header, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	req.Header.Set("X-Api-Key", "sk-ant-bench")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, b
}
