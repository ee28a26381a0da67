package main

import (
	"cmp"
	"context"
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/proxy"
)

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false},
		{"536870912", 512 << 20, false},
		{"512MiB", 512 << 20, false},
		{"2GiB", 2 << 30, false},
		{" 64 kb", 64 << 10, false},
		{"1G", 1 << 30, false},
		{"-1", 0, true},
		{"lots", 0, true},
		{"9999999999GiB", 0, true},
	} {
		got, err := parseByteSize(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// The memory flags: auto derives the budget from the limit, explicit values win, 0 is off, and a
// value that is no size is refused when the flags are parsed.
func TestMemConfig(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	const maxBody = 32 << 20
	for _, tc := range []struct {
		name                string
		mem                 memConfig
		wantLimit           int64 // the runtime's limit after apply (checked when > 0)
		wantBudget          int64
		wantSkim            int64 // 0: the default
		wantCheckErr        string
		skipWithCgroupLimit bool
	}{
		{name: "explicit limit, auto budget", mem: memConfig{"2GiB", "auto", "auto"}, wantLimit: 2 << 30, wantBudget: 512 << 20},
		{name: "budget never below one largest body", mem: memConfig{"64MiB", "auto", "auto"}, wantLimit: 64 << 20, wantBudget: maxBody},
		{name: "explicit budget", mem: memConfig{"2GiB", "100MiB", "auto"}, wantBudget: 100 << 20},
		{name: "budget off", mem: memConfig{"2GiB", "0", "auto"}, wantBudget: -1},
		{name: "no limit", mem: memConfig{"0", "auto", "auto"}, wantLimit: math.MaxInt64, wantBudget: proxy.DefaultInflightBodyBytes},
		{name: "auto without a cgroup limit: the budget bounds the heap", mem: memConfig{"auto", "auto", "auto"}, wantBudget: proxy.DefaultInflightBodyBytes,
			wantLimit: proxy.DefaultInflightBodyBytes + proxy.DefaultSkimCacheBytes + budgetMemoryHeadroom, skipWithCgroupLimit: true},
		{name: "auto, skim cache off: the budget alone bounds the heap", mem: memConfig{"auto", "auto", "0"}, wantBudget: proxy.DefaultInflightBodyBytes,
			wantSkim: -1, wantLimit: proxy.DefaultInflightBodyBytes + budgetMemoryHeadroom, skipWithCgroupLimit: true},
		{name: "explicit skim cache", mem: memConfig{"2GiB", "auto", "8MiB"}, wantBudget: 512 << 20, wantSkim: 8 << 20},
		{name: "bad skim cache", mem: memConfig{"auto", "auto", "lots"}, wantCheckErr: "--skim-cache-bytes"},
		{name: "auto with an explicit budget", mem: memConfig{"auto", "256MiB", "auto"}, wantBudget: 256 << 20,
			wantLimit: 256<<20 + proxy.DefaultSkimCacheBytes + budgetMemoryHeadroom, skipWithCgroupLimit: true},
		{name: "auto, budget off: no limit", mem: memConfig{"auto", "0", "auto"}, wantBudget: -1, wantLimit: math.MaxInt64, skipWithCgroupLimit: true},
		{name: "bad limit", mem: memConfig{"much", "auto", "auto"}, wantCheckErr: "--memory-limit"},
		{name: "bad budget", mem: memConfig{"auto", "1.5GB", "auto"}, wantCheckErr: "--max-inflight-body-bytes"},
		{name: "budget below the largest body", mem: memConfig{"auto", "16MiB", "auto"}, wantCheckErr: "at least --max-body-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skipWithCgroupLimit && cgroupMemoryLimit() > 0 {
				t.Skip("this machine has a cgroup memory limit")
			}
			debug.SetMemoryLimit(math.MaxInt64)
			err := tc.mem.check(maxBody)
			if tc.wantCheckErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantCheckErr) {
					t.Fatalf("check: %v, want an error about %s", err, tc.wantCheckErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			budget, skim, _, err := tc.mem.apply(maxBody)
			if err != nil {
				t.Fatal(err)
			}
			if want := cmp.Or(tc.wantSkim, proxy.DefaultSkimCacheBytes); skim != want {
				t.Errorf("skim cache %d, want %d", skim, want)
			}
			if budget != tc.wantBudget {
				t.Errorf("budget %d, want %d", budget, tc.wantBudget)
			}
			if got := debug.SetMemoryLimit(-1); tc.wantLimit > 0 && got != tc.wantLimit {
				t.Errorf("runtime memory limit %d, want %d", got, tc.wantLimit)
			}
		})
	}
}

// The log is buffered: info lines (the access log) wait in the buffer, a warning is written at
// once together with everything before it, and Close writes out the rest. The periodic flush is
// set to an hour so that nothing here depends on timing.
func TestLogBuffer(t *testing.T) {
	var out syncBuffer
	buf := newLogBuffer(&out, time.Hour)
	log, err := newLogger(buf, buf, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("request", "route", "/v1/responses", "status", 200)
	if s := out.String(); s != "" {
		t.Fatalf("an info line was written unbuffered: %q", s)
	}
	log.With("k", "v").WarnContext(context.Background(), "upstream request failed")
	s := out.String()
	if !strings.Contains(s, "msg=request") || !strings.Contains(s, "upstream request failed") || !strings.Contains(s, "k=v") {
		t.Fatalf("after a warning: %q, want both lines", s)
	}
	log.Info("request", "n", 2)
	buf.Close()
	buf.Close() // idempotent
	if !strings.Contains(out.String(), "n=2") {
		t.Errorf("Close did not write out the buffer: %q", out.String())
	}
}
