package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

const healthcheckHelp = `Reads COMPACTD_LISTEN and COMPACTD_OPS_LISTEN, the serve settings it shares, so that in the
container serve runs in it finds the server without being told where (the image's HEALTHCHECK).`

// healthcheckEnv are the serve settings healthcheck reads from the environment.
var healthcheckEnv = []string{"listen", "ops-listen"}

// healthcheckConfig is `compactd healthcheck`. It exists because the runtime image
// (distroless/static) has no shell, curl or wget: Docker's HEALTHCHECK runs the binary itself in
// exec form. It reads the same COMPACTD_LISTEN / COMPACTD_OPS_LISTEN as `serve` in the same
// container, so it finds the server without being told where it is; no other variable.
type healthcheckConfig struct {
	listen, opsListen string
	url, path         string
	timeout           time.Duration
}

func (c *healthcheckConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", defaultListen, "the server's --listen address")
	fs.StringVar(&c.opsListen, "ops-listen", "", "the server's --ops-listen address; if set, health is probed there")
	deprecate(fs, "admin-listen", "ops-listen")
	fs.StringVar(&c.url, "url", "", "full URL to probe (overrides --listen, --ops-listen and --path)")
	fs.StringVar(&c.path, "path", "/healthz", "path to probe: /healthz (alive) or /readyz (ready for traffic)")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Second, "give up after this long")
}

// target is the URL to probe. A wildcard listen address (0.0.0.0, ::, or an empty host) is
// reached through loopback, which is where a probe inside the container finds the server.
func (c *healthcheckConfig) target() (string, error) {
	if c.url != "" {
		return c.url, nil
	}
	addr := c.listen
	if c.opsListen != "" {
		addr = c.opsListen
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %v", addr, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + c.path, nil
}

func parseHealthcheckFlags(args []string) (c healthcheckConfig, err error) {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	c.flags(fs)
	return c, parseFlags(fs, args, withEnv(healthcheckEnv...))
}

func runHealthcheck(args []string) error {
	c, err := parseHealthcheckFlags(args)
	if err != nil {
		return err
	}
	u, err := c.target()
	if err != nil {
		return err
	}
	status, err := probe(u, c.timeout)
	if err != nil {
		return err
	}
	fmt.Println(status)
	return nil
}

// probe GETs u and succeeds on a 2xx answer. It ignores HTTP(S)_PROXY, which may be set in
// the container for the upstream and must not carry a loopback probe elsewhere.
func probe(u string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return "", fmt.Errorf("%s: no answer within %s", u, timeout)
		}
		return "", fmt.Errorf("%s: unreachable: %v", u, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", fmt.Errorf("%s: unhealthy: %s", u, resp.Status)
	}
	return fmt.Sprintf("%s: %s", u, resp.Status), nil
}
