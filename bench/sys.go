package bench

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Machine describes where a run happened; benchmark figures mean nothing without it.
type Machine struct {
	NumCPU     int
	GOMAXPROCS int
	CPUModel   string
	GoVersion  string
	OS, Arch   string
	// LoadStart and LoadEnd are the 1-minute load averages when the run started and ended; on a
	// shared machine they say how much of the CPU the run actually had.
	LoadStart, LoadEnd float64
}

func machine() Machine {
	return Machine{
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel:   cpuModel(),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		LoadStart:  loadAvg(),
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo ("unknown" elsewhere).
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return -1
	}
	return v
}

// rssBytes is the process's resident set size from /proc/self/status (0 where unavailable).
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// rssSampler samples the process RSS every interval until stopped and keeps the peak, because the
// kernel's own high-water mark (VmHWM) covers the whole process lifetime, not one phase.
type rssSampler struct {
	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(interval time.Duration) *rssSampler {
	s := &rssSampler{peak: rssBytes(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.observe(rssBytes())
			}
		}
	}()
	return s
}

func (s *rssSampler) observe(v int64) {
	s.mu.Lock()
	s.peak = max(s.peak, v)
	s.mu.Unlock()
}

// Peak stops the sampler and returns the highest RSS seen.
func (s *rssSampler) Peak() int64 {
	close(s.stop)
	<-s.done
	s.observe(rssBytes())
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
