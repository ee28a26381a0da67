package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/compactd/compactd/internal/session"
)

const handoffHelp = `Reads COMPACTD_SUMMARIZER_URL, COMPACTD_SUMMARIZER_MODEL and COMPACTD_SUMMARIZER_KEY, the
summariser settings it shares with serve (prefer the variable for the key: flags show up in ps).`

// handoffEnv are the serve settings handoff reads from the environment.
var handoffEnv = []string{"summarizer-url", "summarizer-model", "summarizer-key"}

// handoffConfig is the parsed command line of `compactd handoff`.
type handoffConfig struct {
	format   session.Format
	out      string
	gapCheck int
	budget   int
	watch    string
	idle     time.Duration
	maxBytes int64
	poll     time.Duration
	sumURL   string
	sumModel string
	sumKey   string
	files    []string
}

func parseHandoffFlags(args []string) (handoffConfig, error) {
	var c handoffConfig
	fs := flag.NewFlagSet("handoff", flag.ContinueOnError)
	format := fs.String("format", "auto", "session log format: codex, claude or auto")
	fs.StringVar(&c.out, "o", "", "write the resume to `FILE` (default stdout)")
	fs.IntVar(&c.gapCheck, "gap-check", 0, "run `N` gap checkers in parallel over the raw log (needs a summariser)")
	fs.IntVar(&c.budget, "budget", session.DefaultReduceOptions.MessageTokens, "per-user-message token budget; longer messages lose their middle")
	fs.StringVar(&c.watch, "watch", "", "watch `DIR` recursively and write <session>.resume.md beside each session log")
	fs.DurationVar(&c.idle, "idle", 2*time.Minute, "with --watch: write once a session has been idle this long")
	fs.Int64Var(&c.maxBytes, "max-bytes", 0, "with --watch: also write once a session grew this many bytes since the last resume (0: off)")
	fs.DurationVar(&c.poll, "poll", 0, "with --watch: polling interval (default: idle/4, between 100ms and 5s)")
	fs.StringVar(&c.sumURL, "summarizer-url", "", "Responses API base URL of the summariser")
	fs.StringVar(&c.sumModel, "summarizer-model", "", "summariser model")
	fs.StringVar(&c.sumKey, "summarizer-key", "", "summariser API key (prefer the env variable: flags show up in ps)")
	// Flags may follow the file names too (compactd handoff a.jsonl -o out.md).
	if err := parseFlags(fs, args, withArgs(0, -1), withEnv(handoffEnv...)); err != nil {
		return c, err
	}
	c.files = fs.Args()
	var err error
	if c.format, err = session.ParseFormat(*format); err != nil {
		return c, usageErrorf("handoff", "--format: %v", err)
	}
	c.sumModel = responsesModel(c.sumModel)
	switch {
	case c.watch == "" && len(c.files) == 0:
		return c, usageErrorf("handoff", "no session logs given")
	case c.watch != "" && len(c.files) > 0:
		return c, usageErrorf("handoff", "--watch takes a directory, not session files")
	case c.gapCheck < 0 || c.budget <= 0 || c.idle <= 0 || c.maxBytes < 0:
		return c, usageErrorf("handoff", "--gap-check, --budget, --idle and --max-bytes must not be negative")
	case c.gapCheck > 0 && c.sumModel == "":
		return c, usageErrorf("handoff", "--gap-check needs --summarizer-model (or COMPACTD_SUMMARIZER_MODEL)")
	}
	if c.poll <= 0 {
		c.poll = min(max(c.idle/4, 100*time.Millisecond), 5*time.Second)
	}
	return c, nil
}

func runHandoff(args []string) error {
	c, err := parseHandoffFlags(args)
	if err != nil {
		return err
	}
	var checker session.GapChecker
	if c.gapCheck > 0 {
		checker = session.NewOpenAIGapChecker(c.sumURL, c.sumKey, c.sumModel)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.watch != "" {
		return watchHandoff(ctx, c, checker, os.Stderr)
	}
	return handoffOnce(ctx, c, checker, os.Stdout, os.Stderr)
}

// buildResume parses, reduces and (optionally) gap-checks session logs, returning the Markdown
// and the raw size. A failed gap check is reported and the resume is kept without it: the
// reduction alone is still worth handing over.
func buildResume(ctx context.Context, c handoffConfig, checker session.GapChecker, paths []string, stderr io.Writer) (md string, rawBytes int, err error) {
	sessions := make([]session.Session, 0, len(paths))
	for _, p := range paths {
		s, err := session.ParseSessionFile(p, c.format)
		if err != nil {
			return "", 0, err
		}
		sessions = append(sessions, s)
		rawBytes += s.RawBytes
	}
	r := session.ReduceWith(session.ReduceOptions{MessageTokens: c.budget}, sessions...)
	if checker != nil {
		findings, err := session.GapCheck(ctx, checker, sessions, session.GapCheckOptions{Checkers: c.gapCheck})
		if err != nil {
			fmt.Fprintf(stderr, "compactd handoff: gap check skipped: %v\n", err)
		} else {
			r.GapChecked, r.Findings = true, findings
		}
	}
	return r.Markdown(), rawBytes, nil
}

func handoffOnce(ctx context.Context, c handoffConfig, checker session.GapChecker, stdout, stderr io.Writer) error {
	md, rawBytes, err := buildResume(ctx, c, checker, c.files, stderr)
	if err != nil {
		return err
	}
	if c.out == "" {
		if _, err := io.WriteString(stdout, md); err != nil {
			return err
		}
	} else if err := writeFileAtomic(c.out, md); err != nil {
		return err
	}
	rawTokens := 0
	for _, p := range c.files {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rawTokens += session.CountTokens(string(data))
	}
	fmt.Fprintln(stderr, reductionLine(rawBytes, len(md), rawTokens, session.CountTokens(md)))
	return nil
}

// reductionLine reports the reduction: bytes in → out, tokens in → out (−97.8%).
func reductionLine(bytesIn, bytesOut, tokIn, tokOut int) string {
	pct := 0.0
	if tokIn > 0 {
		pct = 100 * (1 - float64(tokOut)/float64(tokIn))
	}
	return fmt.Sprintf("handoff: %d → %d bytes, %d → %d tokens (−%.1f%%)", bytesIn, bytesOut, tokIn, tokOut, pct)
}

func watchHandoff(ctx context.Context, c handoffConfig, checker session.GapChecker, stderr io.Writer) error {
	if info, err := os.Stat(c.watch); err != nil {
		return err
	} else if !info.IsDir() {
		return fmt.Errorf("--watch %s: not a directory", c.watch)
	}
	w := &session.Watcher{
		Dir: c.watch, Idle: c.idle, MaxBytes: c.maxBytes,
		Handle: func(ctx context.Context, p string) error {
			md, rawBytes, err := buildResume(ctx, c, checker, []string{p}, stderr)
			if err != nil {
				return err
			}
			out := session.ResumePath(p)
			if err := writeFileAtomic(out, md); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "handoff: wrote %s (%d → %d bytes)\n", out, rawBytes, len(md))
			return nil
		},
	}
	fmt.Fprintf(stderr, "handoff: watching %s (idle %s, max-bytes %d); Ctrl-C to stop\n", c.watch, c.idle, c.maxBytes)
	return w.Run(ctx, c.poll, func(_ []string, err error) {
		if err != nil {
			fmt.Fprintf(stderr, "handoff: %v\n", err)
		}
	})
}

// writeFileAtomic writes via a temp file and rename so a reader (the next agent session loading
// the resume) never sees half a file.
func writeFileAtomic(path, data string) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+strings.TrimPrefix(base, ".")+".tmp*")
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
