package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/compactd/compactd/bench"
)

func runBenchCmd(args []string) error { return runBench(args, os.Stdout, os.Stderr) }

// runBench runs the end-to-end benchmark and prints its Markdown tables to out (progress to
// errOut), so `compactd bench > table.md` captures only what goes into BENCHMARKS.md.
func runBench(args []string, out, errOut io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "side-by-side":
			return runSideBySide(args[1:], out, errOut)
		case "bare-proxy":
			return runBareProxy(args[1:], bench.ServeBareProxy)
		case "store-forward-proxy":
			return runBareProxy(args[1:], bench.ServeStoreForwardProxy)
		}
	}
	o := bench.Defaults()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "CI-sized run: short cells, small bodies, few streams (overrides the defaults; explicit flags still win)")
	duration := fs.Duration("duration", o.Duration, "measurement time of each cell (one target, one workload)")
	conc := fs.Int("concurrency", o.Concurrency, "closed-loop workers")
	rates := fs.String("rates", joinFloats(o.Rates), "open-loop request rates per second, comma-separated (empty: none)")
	sizes := fs.String("sizes", formatSizes(o.Sizes...), "request body sizes, comma-separated (KB/MB suffixes; empty: skip the sweep)")
	streams := fs.Int("streams", o.Streams, "concurrent long streams (0: skip)")
	streamFor := fs.Duration("stream-for", o.StreamFor, "length of each long stream")
	warm := fs.String("warm-size", formatSizes(o.WarmSize), "body of the warm-prefix mode (0: skip)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *quick {
		o = bench.Quick()
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["duration"] || !*quick {
		o.Duration = *duration
	}
	if set["concurrency"] || !*quick {
		o.Concurrency = *conc
	}
	if set["streams"] || !*quick {
		o.Streams = *streams
	}
	if set["stream-for"] || !*quick {
		o.StreamFor = *streamFor
	}
	var err error
	if set["rates"] || !*quick {
		if o.Rates, err = parseFloats(*rates); err != nil {
			return usageErrorf("bench", "--rates: %v", err)
		}
	}
	if set["sizes"] || !*quick {
		if o.Sizes, err = parseSizes(*sizes); err != nil {
			return usageErrorf("bench", "--sizes: %v", err)
		}
	}
	if set["warm-size"] || !*quick {
		ws, err := parseSizes(*warm)
		if err != nil || len(ws) != 1 {
			return usageErrorf("bench", "--warm-size: want one size, got %q", *warm)
		}
		o.WarmSize = ws[0]
	}
	if o.Duration <= 0 || o.Concurrency <= 0 {
		return usageErrorf("bench", "--duration and --concurrency must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, o, errOut)
	if err != nil {
		return err
	}
	rep.Markdown(out)
	return nil
}

// runSideBySide is `compactd bench side-by-side`: compactd, a bare httputil.ReverseProxy and
// the fake upstream directly, each its own process spawned from this executable, for the
// issue-18 table (bench/sidebyside.go).
func runSideBySide(args []string, out, errOut io.Writer) error {
	o := bench.SideDefaults()
	fs := flag.NewFlagSet("bench side-by-side", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "CI-sized run: short rounds, small bodies (explicit flags still win)")
	duration := fs.Duration("duration", o.Duration, "each target's share of one round of one row")
	rounds := fs.Int("rounds", o.Rounds, "interleaved rounds per row (the report gives medians)")
	binary := fs.String("binary", "", "the compactd executable to spawn (default: this one)")
	serveBinary := fs.String("serve-binary", "", "measure this compactd's serve instead (e.g. an older build; the fake upstream and the bare proxy still come from --binary)")
	serveArgs := fs.String("serve-args", "", "extra flags for compactd serve, space-separated (e.g. \"--memory-limit 1GiB\")")
	hugeOnly := fs.Bool("huge-only", false, "run only the peak-RSS rows (concurrent huge bodies)")
	hugeConc := fs.String("huge-conc", "", "concurrent bodies of the peak-RSS rows, comma-separated (default 50,100; --quick: 8)")
	hugeRoutes := fs.String("huge-routes", "", "routes of the peak-RSS rows, comma-separated (default every route compactd parses)")
	budget := fs.Int64("inflight-budget", o.InflightBudget, "compactd's --max-inflight-body-bytes in the run (0: do not pass the flag: serve's default, read from its startup log)")
	nginx := fs.String("nginx", "", "the nginx executable of the nginx column (default: nginx in PATH; when there is none or it does not start, the column says \"not run\")")
	storeForward := fs.Bool("store-forward", false, "also measure a store-and-forward reference proxy (compactd's body read and upstream write, nothing else), in a table of its own: what holding a body whole costs, apart from compactd's work on it")
	rows := fs.String("rows", "", "run only the latency rows whose names match this regular expression (e.g. growing: the growing conversations; the peak-RSS rows still run unless --rows is set)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *quick {
		o = bench.SideQuick()
	}
	if *rows != "" {
		re, err := regexp.Compile(*rows)
		if err != nil {
			return usageErrorf("bench", "--rows: %v", err)
		}
		o.Rows = re
		if len(o.HugeConc) > 0 && !*hugeOnly {
			o.HugeConc = nil // --rows picks latency rows: no peak-RSS rows
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["duration"] || !*quick {
		o.Duration = *duration
	}
	if set["rounds"] || !*quick {
		o.Rounds = *rounds
	}
	if o.Duration <= 0 || o.Rounds <= 0 {
		return usageErrorf("bench", "--duration and --rounds must be positive")
	}
	o.Binary, o.ServeBinary = *binary, *serveBinary
	o.ServeArgs, o.HugeOnly, o.Nginx, o.StoreForward = strings.Fields(*serveArgs), *hugeOnly, *nginx, *storeForward
	if set["inflight-budget"] {
		o.InflightBudget = *budget
	}
	if *hugeConc != "" {
		o.HugeConc = nil
		for _, f := range strings.Split(*hugeConc, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return usageErrorf("bench", "--huge-conc: %q is not a positive count", f)
			}
			o.HugeConc = append(o.HugeConc, n)
		}
	}
	if *hugeRoutes != "" {
		o.HugeRoutes = nil
		for _, f := range strings.Split(*hugeRoutes, ",") {
			if f = strings.TrimSpace(f); !slices.Contains(bench.HugeRoutes, f) {
				return usageErrorf("bench", "--huge-routes: %q is not one of %s", f, strings.Join(bench.HugeRoutes, ", "))
			}
			o.HugeRoutes = append(o.HugeRoutes, f)
		}
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Binary = exe
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunSideBySide(ctx, o, errOut)
	if err != nil {
		return err
	}
	rep.Markdown(out)
	return nil
}

// runBareProxy is the hidden `compactd bench bare-proxy` (the floor the side-by-side run spawns)
// and `compactd bench store-forward-proxy` (its --store-forward reference): serve one of them.
func runBareProxy(args []string, serve func(listen, upstream string) error) error {
	fs := flag.NewFlagSet("bench reference proxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := fs.String("upstream", "", "upstream base URL")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return serve(*listen, *upstream)
}

func joinFloats(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive rate", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// formatSizes writes sizes the way parseSizes reads them (2 << 20: "2MB").
func formatSizes(sizes ...int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		switch {
		case n > 0 && n%(1<<20) == 0:
			s[i] = strconv.Itoa(n>>20) + "MB"
		case n > 0 && n%(1<<10) == 0:
			s[i] = strconv.Itoa(n>>10) + "KB"
		default:
			s[i] = strconv.Itoa(n)
		}
	}
	return strings.Join(s, ",")
}

// parseSizes reads "2KB,200KB,2MB" (binary units; a bare number is bytes; "0" is 0).
func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		mult := 1
		for _, u := range []struct {
			suffix string
			mult   int
		}{{"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
			if n, ok := strings.CutSuffix(f, u.suffix); ok {
				f, mult = n, u.mult
				break
			}
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a size", f)
		}
		out = append(out, v*mult)
	}
	return out, nil
}
