package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The nginx column: issue 18's stretch target puts compactd's CPU per request on the 2 KB
// pass-through rows within 2× nginx's. nginx is optional: without one (not in PATH, or a
// --nginx that does not start) the column says "not run" and the run goes on.
//
// The configuration (nginxConfig) is that of a plain reverse proxy as one would deploy it in
// front of an LLM API, tuned only where a default would be unfair to nginx or make it measure
// something else than the Go proxies do:
//
//   - daemon off, so that the harness owns the master's pid and stops it; master_process on with
//     worker_processes auto: that is how nginx runs in production (master_process off is a
//     debugging mode), and auto (one worker per core, two here) lets nginx use the cores the Go
//     proxies use (GOMAXPROCS is the number of CPUs). CPU per request is the CPU time of the
//     master and every worker over the requests, so more workers do not flatter it; with one
//     worker nginx's req/s would be capped at one core while the others have two.
//   - the access log on, unbuffered, into the pipe the harness drains (/dev/stderr): one write
//     per request, as compactd's access log line to its stderr pipe; buffering it would give
//     nginx a cheaper log than compactd's.
//   - an upstream keepalive pool (proxy_http_version 1.1, Connection "") as both Go proxies keep
//     one, and no limit on requests per connection either way (nginx closes a keep-alive
//     connection after 1000 requests by default; Go never does), so nobody churns connections.
//   - proxy_request_buffering off and proxy_buffering off: bodies stream both ways as in the Go
//     proxies (no spooling to disk of a 20 MB body, SSE events relayed as they come);
//     client_max_body_size 64m, the fake upstream's own limit, above the 2 MB and 20 MB rows.
//   - everything (pid, logs, temp paths) in a temp dir of its own, listening on 127.0.0.1 only.

// nginxProc is a running nginx master and its workers.
type nginxProc struct {
	cmd  *exec.Cmd
	addr string
	dir  string
	done chan struct{}
}

// nginxConfig is the configuration of the nginx target: listen on listen, proxy to upstream
// (host:port), everything else under dir.
func nginxConfig(dir, listen, upstream string) string {
	return fmt.Sprintf(`# compactd bench side-by-side: nginx as a bare reverse proxy (bench/sidebyside_nginx.go says why).
daemon off;
master_process on;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;

events {
    worker_connections 4096;
}

http {
    access_log /dev/stderr;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    client_max_body_size 64m;
    keepalive_requests 1000000;
    keepalive_timeout 75s;

    upstream fake {
        server %[2]s;
        keepalive 128;
        keepalive_requests 1000000;
    }

    server {
        listen %[3]s;
        location / {
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_request_buffering off;
            proxy_buffering off;
            proxy_read_timeout 300s;
            proxy_send_timeout 300s;
        }
    }
}
`, dir, upstream, listen)
}

// startNginx starts nginx (bin; "" looks it up in PATH) in front of upstream (a base URL). It
// returns nil and why when nginx does not run, else the process and how it runs.
func startNginx(ctx context.Context, bin, upstream string) (*nginxProc, string) {
	if bin == "" {
		p, err := exec.LookPath("nginx")
		if err != nil {
			return nil, "not run: no nginx in PATH (--nginx names one)"
		}
		bin = p
	}
	n, err := spawnNginx(ctx, bin, strings.TrimPrefix(upstream, "http://"))
	if err != nil {
		return nil, "not run: " + err.Error()
	}
	// A listening socket is the master's; one request through it proves a worker proxies to
	// the fake upstream (and that the workers are there to be counted).
	client := newClient(1)
	status, body := get(ctx, client, "http://"+n.addr+"/v1/models")
	client.CloseIdleConnections()
	if status != http.StatusOK {
		n.stop()
		return nil, fmt.Sprintf("not run: GET /v1/models through nginx: status %d %.200s", status, body)
	}
	version := "nginx"
	if out, err := exec.CommandContext(ctx, bin, "-v").CombinedOutput(); err == nil {
		version = strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
	}
	return n, fmt.Sprintf("%s, master_process on, worker_processes auto (%d workers on %d CPUs), access log on (unbuffered), upstream keepalive, request and response buffering off; its CPU per request sums the master and every worker",
		version, len(childPIDs(n.pid())), runtime.NumCPU())
}

func spawnNginx(ctx context.Context, bin, upstream string) (*nginxProc, error) {
	// A directory of its own, readable by nginx's workers (they drop root for nobody and write
	// their temp files here), apart from the run's private one.
	dir, err := os.MkdirTemp("", "compactd-bench-nginx-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	listen, err := freeAddr()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(dir, listen, upstream)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	// Its own process group, so that a master that will not stop is killed with its workers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n := &nginxProc{cmd: cmd, addr: listen, dir: dir, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		_, _ = io.Copy(io.Discard, stderr) // the access log
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-n.done:
			err := fmt.Errorf("%s exited before listening: %s", bin, n.errorLog())
			os.RemoveAll(dir)
			return nil, err
		case <-ctx.Done():
			n.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("%s did not listen on %s within 10s", bin, listen)
		}
	}
	return n, nil
}

// errorLog is the tail of nginx's error log, for a start that failed.
func (n *nginxProc) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	if len(b) == 0 {
		return "no error log"
	}
	return string(b)
}

func (n *nginxProc) pid() int { return n.cmd.Process.Pid }

// stop shuts nginx down fast (SIGTERM: the master stops its workers), or kills its process group.
func (n *nginxProc) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-n.pid(), syscall.SIGKILL)
		<-n.done
	}
	os.RemoveAll(n.dir)
}

// pids are the master and its workers, listed afresh (a worker that died was replaced).
func (n *nginxProc) pids() []int { return append([]int{n.pid()}, childPIDs(n.pid())...) }

// cpu is the CPU time so far of the master and its workers.
func (n *nginxProc) cpu() time.Duration {
	var d time.Duration
	for _, p := range n.pids() {
		d += procCPU(p)
	}
	return d
}

// childPIDs lists the processes whose parent is pid, from /proc/*/stat.
func childPIDs(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := procPPID(c); ok && ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// procPPID is field 4 of /proc/PID/stat.
func procPPID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// freeAddr is a free 127.0.0.1 port, for a server that cannot be told to pick one itself.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// LoadAvg is the 1-, 5- and 15-minute load averages, as uptime prints them.
type LoadAvg [3]float64

// uptimeLoad reads /proc/loadavg (all -1 where there is none).
func uptimeLoad() LoadAvg {
	l := LoadAvg{-1, -1, -1}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Split(bufio.ScanWords)
	for i := 0; i < 3 && sc.Scan(); i++ {
		if v, err := strconv.ParseFloat(sc.Text(), 64); err == nil {
			l[i] = v
		}
	}
	return l
}

func (l LoadAvg) String() string {
	if l[0] < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.2f, %.2f, %.2f", l[0], l[1], l[2])
}

func get(ctx context.Context, c *http.Client, url string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}
