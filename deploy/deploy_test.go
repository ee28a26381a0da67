// Package deploy_test checks the deployment files against each other and against the binary
// they ship. There is no Docker engine or Kubernetes cluster on the build machines, so what can
// be checked is checked here: the Dockerfile builds with exactly deploy/build.sh, that build is a
// static binary that serves `healthcheck`, and every port, probe, path, file, Secret and
// ConfigMap the YAML refers to exists.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"go.yaml.in/yaml/v3"

	"github.com/compactd/compactd/internal/crypto"
	"github.com/compactd/compactd/internal/fakeupstream"
)

// root is the repository root, relative to this package's directory (where go test runs).
const root = ".."

func path(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }

// ---- building the binary once ----

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

const testVersion = "v0.0.0-deploytest"

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "compactd-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// releaseBuild reports whether the tests build the binary with deploy/build.sh, exactly as the
// Dockerfile ships it. CI does (CI=true, or COMPACTD_TEST_RELEASE_BUILD=1 anywhere): its flags
// (CGO_ENABLED=0, -trimpath) give every package another build-cache key than `go test`'s, so on
// a machine whose environment does not share them (.ci/run exports them) the release build
// compiles the whole module a second time, about four minutes on two cores with a cold cache.
// Otherwise the binary is built with the go command's default flags, which reuse the packages
// `go test ./...` just compiled, and only the release-specific checks of TestBuildScript skip.
func releaseBuild() bool {
	return os.Getenv("CI") != "" || os.Getenv("COMPACTD_TEST_RELEASE_BUILD") == "1"
}

// binary builds compactd once per test run: with deploy/build.sh when releaseBuild, else with
// `go build` and the same version stamp.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "compactd")
		var cmd *exec.Cmd
		if releaseBuild() {
			cmd = exec.Command("sh", path("deploy", "build.sh"), binPath)
			cmd.Env = append(os.Environ(), "VERSION="+testVersion)
		} else {
			cmd = exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binPath, "./cmd/compactd")
			cmd.Dir = root
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// ---- Dockerfile ----

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	cmd   string // upper case: FROM, RUN, ...
	args  string
	stage int // index of the FROM it belongs to
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	b, err := os.ReadFile(path("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	stage := -1
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instruction{cmd: cmd, args: strings.TrimSpace(args), stage: stage})
	}
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return out
}

func find(ins []instruction, cmd string) []instruction {
	var out []instruction
	for _, in := range ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// dockerEnv collects ENV KEY=VALUE pairs of the final stage.
func dockerEnv(t *testing.T, ins []instruction) map[string]string {
	t.Helper()
	last := ins[len(ins)-1].stage
	env := map[string]string{}
	for _, in := range find(ins, "ENV") {
		if in.stage != last {
			continue
		}
		for _, kv := range strings.Fields(in.args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("ENV %q: use the KEY=VALUE form", in.args)
			}
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

func listenPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t)
	froms := find(ins, "FROM")
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got %d FROM", len(froms))
	}
	final := ins[len(ins)-1].stage
	if got := froms[len(froms)-1].args; got != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime image = %q, want distroless static nonroot", got)
	}

	// The build stage runs deploy/build.sh and nothing else builds Go.
	var built bool
	for _, in := range find(ins, "RUN") {
		if strings.Contains(in.args, "go build") {
			t.Errorf("RUN %q: build only through deploy/build.sh", in.args)
		}
		if regexp.MustCompile(`(^|\s)deploy/build\.sh /out/compactd(\s|$)`).MatchString(in.args) && in.stage < final {
			built = true
		}
	}
	if !built {
		t.Error("no build-stage RUN invokes deploy/build.sh /out/compactd")
	}
	var copied bool
	for _, in := range find(ins, "COPY") {
		if in.stage == final && strings.HasSuffix(in.args, "/out/compactd /compactd") && strings.Contains(in.args, "--from=") {
			copied = true
		}
	}
	if !copied {
		t.Error("the runtime stage does not copy /out/compactd to /compactd")
	}

	single := func(cmd string) string {
		t.Helper()
		var got []string
		for _, in := range find(ins, cmd) {
			if in.stage == final {
				got = append(got, in.args)
			}
		}
		if len(got) != 1 {
			t.Fatalf("final stage has %d %s instructions, want 1", len(got), cmd)
		}
		return got[0]
	}
	if u := single("USER"); u != "nonroot" && u != "65532" && u != "65532:65532" {
		t.Errorf("USER %s, want nonroot", u)
	}
	if ep := single("ENTRYPOINT"); ep != `["/compactd"]` {
		t.Errorf("ENTRYPOINT %s", ep)
	}

	// HEALTHCHECK in exec form (the image has no shell).
	hc := single("HEALTHCHECK")
	_, execForm, ok := strings.Cut(hc, "CMD ")
	var argv []string
	if !ok || json.Unmarshal([]byte(execForm), &argv) != nil {
		t.Fatalf("HEALTHCHECK %q is not CMD in exec (JSON) form", hc)
	}
	if !slices.Equal(argv, []string{"/compactd", "healthcheck"}) {
		t.Errorf("HEALTHCHECK runs %q", argv)
	}

	env := dockerEnv(t, ins)
	if env["COMPACTD_LISTEN"] != "0.0.0.0:8080" {
		t.Errorf("COMPACTD_LISTEN = %q", env["COMPACTD_LISTEN"])
	}
	expose := single("EXPOSE")
	if want := strconv.Itoa(listenPort(t, env["COMPACTD_LISTEN"])); strings.TrimSuffix(expose, "/tcp") != want {
		t.Errorf("EXPOSE %s, but COMPACTD_LISTEN port is %s", expose, want)
	}
	var vols []string
	if err := json.Unmarshal([]byte(single("VOLUME")), &vols); err != nil {
		t.Fatalf("VOLUME: %v", err)
	}
	if dd := env["COMPACTD_DATA_DIR"]; dd == "" || !slices.Contains(vols, dd) {
		t.Errorf("COMPACTD_DATA_DIR %q is not a VOLUME %q", dd, vols)
	}
	// Keys come from the environment or a mounted file at run time, never from the image.
	for _, in := range ins {
		if in.cmd == "ENV" || in.cmd == "ARG" {
			for _, secret := range []string{"COMPACTD_KEYS", "COMPACTD_KEY_FILE", "COMPACTD_SUMMARIZER_KEY", "API_KEY"} {
				if strings.Contains(in.args, secret) {
					t.Errorf("%s %s bakes a secret into the image", in.cmd, in.args)
				}
			}
		}
	}
}

// TestDockerignore checks the build context with Docker's own matcher: everything the build
// needs is in it, and keys, local state and build output are not.
// minBuilderGo is the oldest Go patch release the image may be built with: the newest one that
// fixes a called standard-library vulnerability in the pinned vulnerability database
// (.ci/govulncheck.sh lists them; GO-2026-6809 is fixed in go1.26.10). Raise it with the
// database.
const minBuilderGo = "1.26.10"

// TestDockerfileBuilderGo: the image's builder is a Go of go.mod's minor release, at least its
// minimum, and no older than minBuilderGo: a release image built with go.mod's minimum (the CI
// machines' go1.26.8) would ship the standard library's known, called vulnerabilities.
func TestDockerfileBuilderGo(t *testing.T) {
	b, err := os.ReadFile(path("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Dockerfile: no ARG GO_VERSION=…")
	}
	builder := string(m[1])
	mod, err := os.ReadFile(path("go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	g := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if g == nil {
		t.Fatal("go.mod: no go line")
	}
	parse := func(v string) [3]int {
		var out [3]int
		parts := strings.Split(v, ".")
		if len(parts) != 3 {
			t.Fatalf("%q is not a Go patch release (major.minor.patch)", v)
		}
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("%q is not a Go patch release: %v", v, err)
			}
			out[i] = n
		}
		return out
	}
	bv, gv, minv := parse(builder), parse(string(g[1])), parse(minBuilderGo)
	if bv[0] != gv[0] || bv[1] != gv[1] {
		t.Errorf("builder Go %s is not go.mod's release %d.%d", builder, gv[0], gv[1])
	}
	if slices.Compare(bv[:], gv[:]) < 0 {
		t.Errorf("builder Go %s is older than go.mod's minimum %s", builder, g[1])
	}
	if slices.Compare(bv[:], minv[:]) < 0 {
		t.Errorf("builder Go %s is older than %s, which fixes called standard-library vulnerabilities", builder, minBuilderGo)
	}
}

func TestDockerignore(t *testing.T) {
	f, err := os.Open(path(".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	// The sources of every package the binary is built from, as go list reports them.
	out, err := exec.Command("go", "list", "-deps", "-f",
		`{{if not .Standard}}{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}{{end}}`, "../cmd/compactd").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	need := []string{"go.mod", "go.sum", "deploy/build.sh", "Dockerfile"}
	for _, line := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, line)
		if err != nil {
			t.Fatal(err)
		}
		need = append(need, filepath.ToSlash(rel))
	}
	if len(need) < 20 {
		t.Fatalf("go list found only %d files", len(need))
	}
	for _, p := range need {
		if ex, _ := pm.MatchesOrParentMatches(p); ex && p != "Dockerfile" {
			t.Errorf("%s is needed by the build but .dockerignore excludes it", p)
		}
	}
	for _, p := range []string{".git/config", "compactd", "keyring", "data/keyring", ".env", "deploy/compose/.env", "proxy/x_test.go", "tls.key"} {
		if ex, _ := pm.MatchesOrParentMatches(p); !ex {
			t.Errorf("%s would be sent to the Docker daemon", p)
		}
	}
}

// ---- the binary ----

func TestBuildScript(t *testing.T) {
	script, err := os.ReadFile(path("deploy", "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(script), "go build"); n != 1 {
		t.Errorf("deploy/build.sh has %d go build lines, want exactly one", n)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", "-X main.version="} {
		if !strings.Contains(string(script), want) {
			t.Errorf("deploy/build.sh does not build with %s", want)
		}
	}
	if !releaseBuild() {
		t.Skip("the release build's checks (static, flags, version stamp) run with CI=true or COMPACTD_TEST_RELEASE_BUILD=1 (.ci/run sets CI)")
	}
	bin := binary(t)

	// Static: no program interpreter, no dynamic section, no shared libraries.
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header: not static", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs %v", libs)
	}

	// The flags are the ones the Dockerfile ships with.
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("build setting %s = %q, want %q", k, settings[k], want)
		}
	}
	// -ldflags is not recorded under -trimpath; the stamped version shows it took effect.
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.Contains(string(out), testVersion) {
		t.Errorf("compactd version = %q, %v; want %s", out, err, testVersion)
	}
}

// serve starts `compactd serve` and returns its address, and its ops listener's address if it
// has one, once it is listening.
func serve(t *testing.T, bin string, env ...string) (addr, ops string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(cleanEnv(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	type listening struct{ main, ops string }
	ready := make(chan listening, 1)
	go func() {
		var l listening
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(line.Msg, "ops listener"):
				l.ops = line.Addr
			case line.Msg == "compactd listening":
				l.main = line.Addr
				ready <- l
			}
		}
		close(ready)
	}()
	select {
	case l, ok := <-ready:
		if !ok {
			t.Fatal("compactd serve exited before listening")
		}
		return l.main, l.ops
	case <-time.After(60 * time.Second):
		t.Fatal("compactd serve did not start")
	}
	return "", ""
}

// cleanEnv is the test's environment without COMPACTD_* settings of whoever runs it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMPACTD_") {
			env = append(env, kv)
		}
	}
	return env
}

func TestBinaryServesHealthcheck(t *testing.T) {
	bin := binary(t)
	fake := fakeupstream.New(fakeupstream.Options{})
	fake.FailOnRefusal(t) // the test fails if the upstream refused what compactd sent
	upstream, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"COMPACTD_UPSTREAM=" + upstream, "COMPACTD_KEYS=" + key.String(), "COMPACTD_DATA_DIR=" + t.TempDir()}
	addr, _ := serve(t, bin, common...)
	port := strconv.Itoa(listenPort(t, addr))
	// As compose runs it: metrics and probes on a separate ops listener.
	mainAddr, opsAddr := serve(t, bin, append(common, "COMPACTD_OPS_LISTEN=127.0.0.1:0")...)
	if opsAddr == "" {
		t.Fatal("no ops listener address logged")
	}

	// The paths the deployment files probe and scrape are served by this very binary.
	dep := loadKubernetes(t).deployment(t)
	c := dep.Spec.Template.Spec.Containers[0]
	paths := []string{c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path, scrapePath(t)}
	if c.StartupProbe != nil {
		paths = append(paths, c.StartupProbe.HTTPGet.Path)
	}
	for _, p := range paths {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %s", p, resp.Status)
		}
	}
	if resp, err := http.Get("http://" + opsAddr + scrapePath(t)); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("metrics on the ops listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("health and metrics requests reached the upstream (%d requests)", n)
	}

	unhealthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unhealthy.Close()
	dead := deadAddr(t)

	tests := []struct {
		name   string
		args   []string
		env    []string
		wantOK bool
	}{
		// Exactly the image's HEALTHCHECK: no flags, the address from the image's environment.
		{"image HEALTHCHECK via COMPACTD_LISTEN", nil, []string{"COMPACTD_LISTEN=0.0.0.0:" + port}, true},
		{"--listen", []string{"--listen", addr}, nil, true},
		{"readiness", []string{"--listen", addr, "--path", "/readyz"}, nil, true},
		{"ops listener via COMPACTD_OPS_LISTEN", nil, []string{"COMPACTD_LISTEN=" + mainAddr, "COMPACTD_OPS_LISTEN=0.0.0.0:" + strconv.Itoa(listenPort(t, opsAddr))}, true},
		{"ops listener down", nil, []string{"COMPACTD_LISTEN=" + mainAddr, "COMPACTD_OPS_LISTEN=" + deadAddr(t)}, false},
		{"dead port", []string{"--listen", dead}, nil, false},
		{"dead port via env", nil, []string{"COMPACTD_LISTEN=0.0.0.0:" + strconv.Itoa(listenPort(t, dead))}, false},
		{"unhealthy server", []string{"--url", unhealthy.URL + "/healthz"}, nil, false},
		{"not compactd", []string{"--url", upstream + "/healthz"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"healthcheck"}, tt.args...)...)
			cmd.Env = append(cleanEnv(), tt.env...)
			out, err := cmd.CombinedOutput()
			if ok := err == nil; ok != tt.wantOK {
				t.Errorf("healthcheck: err = %v, want ok=%v; output:\n%s", err, tt.wantOK, out)
			}
		})
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// ---- Kubernetes ----

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type selector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	EnvFrom []struct {
		ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
		SecretRef    *struct{ Name string } `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef    *struct{ Name, Key string } `yaml:"secretKeyRef"`
			ConfigMapKeyRef *struct{ Name, Key string } `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type deployment struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		Selector selector `yaml:"selector"`
		Template struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot *bool `yaml:"runAsNonRoot"`
					RunAsUser    int   `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name     string    `yaml:"name"`
					EmptyDir *struct{} `yaml:"emptyDir"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// object is one parsed manifest: its kind and name, and the document to decode further.
type object struct {
	Kind, Name, File string
	node             *yaml.Node
}

type kube struct {
	objects []object
	images  []string
}

func (k *kube) get(t *testing.T, kind string) []object {
	t.Helper()
	var out []object
	for _, o := range k.objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func (k *kube) one(t *testing.T, kind string, v any) object {
	t.Helper()
	objs := k.get(t, kind)
	if len(objs) != 1 {
		t.Fatalf("want exactly one %s, have %d", kind, len(objs))
	}
	if err := objs[0].node.Decode(v); err != nil {
		t.Fatalf("%s: %v", objs[0].File, err)
	}
	return objs[0]
}

func (k *kube) deployment(t *testing.T) deployment {
	t.Helper()
	var d deployment
	k.one(t, "Deployment", &d)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment has %d containers", len(d.Spec.Template.Spec.Containers))
	}
	return d
}

// loadKubernetes parses kustomization.yaml and every resource it lists, and checks that every
// YAML file in the directory is one of them.
func loadKubernetes(t *testing.T) *kube {
	t.Helper()
	dir := path("deploy", "kubernetes")
	var kz struct {
		Resources []string `yaml:"resources"`
		Images    []struct {
			Name string `yaml:"name"`
		} `yaml:"images"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kz); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	k := &kube{}
	for _, im := range kz.Images {
		k.images = append(k.images, im.Name)
	}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, res := range kz.Resources {
		listed[res] = true
		b, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", res, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			var head struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   meta   `yaml:"metadata"`
			}
			if err := doc.Decode(&head); err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			if head.APIVersion == "" || head.Kind == "" || head.Metadata.Name == "" {
				t.Errorf("%s: a document without apiVersion, kind or metadata.name", res)
			}
			k.objects = append(k.objects, object{Kind: head.Kind, Name: head.Metadata.Name, File: res, node: &doc})
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); (ext == ".yaml" || ext == ".yml") && !listed[e.Name()] {
			t.Errorf("%s is not listed in kustomization.yaml", e.Name())
		}
	}
	return k
}

// portOf resolves a probe or targetPort (a name or a number) against the container's ports.
func portOf(c container, p any) (int, bool) {
	for _, cp := range c.Ports {
		switch v := p.(type) {
		case string:
			if v == cp.Name {
				return cp.ContainerPort, true
			}
		case int:
			if v == cp.ContainerPort {
				return v, true
			}
		}
	}
	return 0, false
}

func matches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestKubernetes(t *testing.T) {
	k := loadKubernetes(t)
	for _, kind := range []string{"Deployment", "Service", "Secret", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor"} {
		if len(k.get(t, kind)) == 0 {
			t.Errorf("no %s", kind)
		}
	}
	dep := k.deployment(t)
	pod := dep.Spec.Template
	c := pod.Spec.Containers[0]
	if !matches(dep.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, pod.Metadata.Labels)
	}
	if !slices.ContainsFunc(k.images, func(n string) bool { return c.Image == n || strings.HasPrefix(c.Image, n+":") }) {
		t.Errorf("image %q is not one kustomization.yaml sets", c.Image)
	}

	// ConfigMaps and Secrets, by name, with their keys.
	data := map[string]map[string]string{}
	for _, kind := range []string{"ConfigMap", "Secret"} {
		for _, o := range k.get(t, kind) {
			var v struct {
				Data       map[string]string `yaml:"data"`
				StringData map[string]string `yaml:"stringData"`
			}
			if err := o.node.Decode(&v); err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for k, x := range v.Data {
				m[k] = x
			}
			for k, x := range v.StringData {
				m[k] = x
			}
			data[kind+"/"+o.Name] = m
		}
	}
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			m, ok := data["ConfigMap/"+ef.ConfigMapRef.Name]
			if !ok {
				t.Errorf("envFrom ConfigMap %q does not exist", ef.ConfigMapRef.Name)
			}
			for k, v := range m {
				env[k] = v
			}
		case ef.SecretRef != nil:
			if _, ok := data["Secret/"+ef.SecretRef.Name]; !ok {
				t.Errorf("envFrom Secret %q does not exist", ef.SecretRef.Name)
			}
		}
	}
	var keysFromSecret bool
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			continue
		}
		for kind, ref := range map[string]*struct{ Name, Key string }{"Secret": e.ValueFrom.SecretKeyRef, "ConfigMap": e.ValueFrom.ConfigMapKeyRef} {
			if ref == nil {
				continue
			}
			m, ok := data[kind+"/"+ref.Name]
			if _, has := m[ref.Key]; !ok || !has {
				t.Errorf("env %s refers to %s %s key %s, which does not exist", e.Name, kind, ref.Name, ref.Key)
			}
			if kind == "Secret" && e.Name == "COMPACTD_KEYS" {
				keysFromSecret = true
			}
		}
	}
	if !keysFromSecret {
		t.Error("COMPACTD_KEYS does not come from a Secret")
	}
	for name, v := range env {
		if strings.Contains(name, "KEY") && name != "COMPACTD_KEY_FILE" {
			t.Errorf("%s is set in plain configuration (%q); keys belong in the Secret", name, v)
		}
	}

	// The port compactd listens on, probed and targeted by the Service; and the ops listener's,
	// the only one that serves /metrics once it is set, which the ServiceMonitor must scrape.
	listen, ok := env["COMPACTD_LISTEN"]
	if !ok {
		t.Fatal("COMPACTD_LISTEN is not configured")
	}
	port := listenPort(t, listen)
	if len(c.Ports) == 0 {
		t.Fatal("no container ports")
	}
	if _, ok := portOf(c, port); !ok {
		t.Errorf("COMPACTD_LISTEN port %d is not a containerPort", port)
	}
	metricsPort := port
	if ops, ok := env["COMPACTD_OPS_LISTEN"]; ok {
		metricsPort = listenPort(t, ops)
		if _, ok := portOf(c, metricsPort); !ok {
			t.Errorf("COMPACTD_OPS_LISTEN port %d is not a containerPort", metricsPort)
		}
	}
	probes := map[string]*probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
	for name, want := range map[string]string{"liveness": "/healthz", "readiness": "/readyz"} {
		if p := probes[name]; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("%s probe is not GET %s", name, want)
		}
	}
	for name, p := range probes {
		if p == nil || p.HTTPGet == nil {
			continue
		}
		if got, ok := portOf(c, p.HTTPGet.Port); !ok || got != port {
			t.Errorf("%s probe port %v is not the listen port %d", name, p.HTTPGet.Port, port)
		}
	}

	var svc struct {
		Metadata meta `yaml:"metadata"`
		Spec     struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	k.one(t, "Service", &svc)
	if !matches(svc.Spec.Selector, pod.Metadata.Labels) {
		t.Errorf("Service selector %v does not select the pods", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) == 0 {
		t.Fatal("Service has no ports")
	}
	servicePorts := map[string]int{} // Service port name -> the container port it reaches
	for _, sp := range svc.Spec.Ports {
		got, ok := portOf(c, sp.TargetPort)
		if !ok || got != port && got != metricsPort {
			t.Errorf("Service port %s targets %v, not the listen port %d or the ops port %d", sp.Name, sp.TargetPort, port, metricsPort)
		}
		servicePorts[sp.Name] = got
	}

	var sm struct {
		Spec struct {
			Selector  selector `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	k.one(t, "ServiceMonitor", &sm)
	if !matches(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select Service %s %v", sm.Spec.Selector.MatchLabels, svc.Metadata.Name, svc.Metadata.Labels)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Error("ServiceMonitor has no endpoints")
	}
	if want := fmt.Sprintf("(%d, `COMPACTD_OPS_LISTEN`) for `/metrics`", metricsPort); !strings.Contains(readmeSection(t, "### Kubernetes"), want) {
		t.Errorf("README's Kubernetes section does not name the metrics port: want %q", want)
	}
	for _, ep := range sm.Spec.Endpoints {
		target, named := servicePorts[ep.Port]
		switch {
		case !named:
			t.Errorf("ServiceMonitor scrapes port %q, which the Service does not name", ep.Port)
		case target != metricsPort:
			t.Errorf("ServiceMonitor scrapes port %q (container port %d), but /metrics is served on %d", ep.Port, target, metricsPort)
		}
		if ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor path %q", ep.Path)
		}
	}

	var pdb struct {
		Spec struct {
			Selector       selector `yaml:"selector"`
			MinAvailable   any      `yaml:"minAvailable"`
			MaxUnavailable any      `yaml:"maxUnavailable"`
		} `yaml:"spec"`
	}
	k.one(t, "PodDisruptionBudget", &pdb)
	if !matches(pdb.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Error("PodDisruptionBudget does not select the pods")
	}
	if pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
		t.Error("PodDisruptionBudget sets neither minAvailable nor maxUnavailable")
	}
	var hpa struct {
		Spec struct {
			ScaleTargetRef struct{ Kind, Name string } `yaml:"scaleTargetRef"`
			MinReplicas    int                         `yaml:"minReplicas"`
			MaxReplicas    int                         `yaml:"maxReplicas"`
		} `yaml:"spec"`
	}
	k.one(t, "HorizontalPodAutoscaler", &hpa)
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != dep.Metadata.Name {
		t.Errorf("HPA scales %+v, not Deployment %s", hpa.Spec.ScaleTargetRef, dep.Metadata.Name)
	}
	if hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < hpa.Spec.MinReplicas {
		t.Errorf("HPA replicas %d..%d", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}

	// Security.
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("container has no securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case !slices.Contains(sc.Capabilities.Drop, "ALL"):
		t.Error("capabilities do not drop ALL")
	}
	nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) ||
		(pod.Spec.SecurityContext.RunAsNonRoot != nil && *pod.Spec.SecurityContext.RunAsNonRoot)
	if !nonRoot || pod.Spec.SecurityContext.RunAsUser == 0 {
		t.Error("pod may run as root")
	}
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("no %s request", r)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Error("no memory limit")
	}

	// The data dir is a writable emptyDir (the root filesystem is read-only).
	dataDir := env["COMPACTD_DATA_DIR"]
	vols := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v.EmptyDir != nil
	}
	var dataMounted bool
	for _, m := range c.VolumeMounts {
		emptyDir, ok := vols[m.Name]
		if !ok {
			t.Errorf("volumeMount %s names no volume", m.Name)
		}
		if m.MountPath == dataDir && emptyDir {
			dataMounted = true
		}
	}
	if !dataMounted {
		t.Errorf("COMPACTD_DATA_DIR %q is not an emptyDir mount", dataDir)
	}

	// Streams drain within --shutdown-grace, after the preStop sleep, before SIGKILL.
	grace, err := time.ParseDuration(env["COMPACTD_SHUTDOWN_GRACE"])
	if err != nil {
		t.Fatalf("COMPACTD_SHUTDOWN_GRACE: %v", err)
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if term := time.Duration(pod.Spec.TerminationGracePeriodSeconds) * time.Second; term <= preStop+grace {
		t.Errorf("terminationGracePeriodSeconds %v <= preStop %v + shutdown grace %v", term, preStop, grace)
	}

	// The Secret is a placeholder compactd refuses, so nobody runs on a key from a repository.
	secret := data["Secret/compactd-keyring"]["COMPACTD_KEYS"]
	if _, err := crypto.ParseKeyring(secret); err == nil {
		t.Error("the Secret's COMPACTD_KEYS is a real keyring; ship a placeholder")
	}
}

// ---- compose ----

// interpolate resolves ${VAR:-default} and ${VAR} as compose does with VAR unset.
func interpolate(s string) string {
	return regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`).ReplaceAllString(s, "$1")
}

type composeFile struct {
	Services map[string]struct {
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Image       string            `yaml:"image"`
		Profiles    []string          `yaml:"profiles"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		StopGrace   string            `yaml:"stop_grace_period"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(path("deploy", "compose", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return cf
}

// scrapePath is the metrics path the compose Prometheus scrapes.
func scrapePath(t *testing.T) string {
	t.Helper()
	p := prometheusConfig(t)
	if len(p.ScrapeConfigs) == 0 {
		t.Fatal("prometheus.yml has no scrape_configs")
	}
	if p.ScrapeConfigs[0].MetricsPath == "" {
		return "/metrics"
	}
	return p.ScrapeConfigs[0].MetricsPath
}

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func prometheusConfig(t *testing.T) promConfig {
	t.Helper()
	b, err := os.ReadFile(path("deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var p promConfig
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	return p
}

func TestCompose(t *testing.T) {
	cf := loadCompose(t)
	dir := path("deploy", "compose")
	for _, name := range []string{"compactd", "prometheus", "grafana"} {
		if _, ok := cf.Services[name]; !ok {
			t.Fatalf("no %s service", name)
		}
	}

	// Every file and directory the stack mounts or builds from exists.
	mounts := map[string]string{} // container path -> host path
	for name, s := range cf.Services {
		if s.Build != nil {
			ctx := filepath.Join(dir, s.Build.Context)
			if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", name, err)
			}
		}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("%s: volume %q", name, v)
				continue
			}
			src := parts[0]
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := cf.Volumes[src]; !ok {
					t.Errorf("%s: named volume %q is not declared", name, src)
				}
				continue
			}
			host := filepath.Join(dir, src)
			if _, err := os.Stat(host); err != nil {
				t.Errorf("%s mounts %s: %v", name, src, err)
			}
			mounts[name+":"+parts[1]] = host
		}
	}

	// compactd listens on the port it publishes, the image's port.
	cd := cf.Services["compactd"]
	listen := interpolate(cd.Environment["COMPACTD_LISTEN"])
	port := listenPort(t, listen)
	if want := 8080; port != want {
		t.Errorf("compose COMPACTD_LISTEN port %d, the image exposes %d", port, want)
	}
	published := false
	for _, p := range cd.Ports {
		parts := strings.Split(interpolate(p), ":")
		if parts[len(parts)-1] == strconv.Itoa(port) {
			published = true
		}
	}
	if !published {
		t.Errorf("compactd does not publish its listen port %d: %v", port, cd.Ports)
	}
	if cd.Build == nil {
		t.Error("compactd is not built from the Dockerfile")
	}
	if g, err := time.ParseDuration(interpolate(cd.Environment["COMPACTD_SHUTDOWN_GRACE"])); err != nil {
		t.Errorf("COMPACTD_SHUTDOWN_GRACE: %v", err)
	} else if stop, err := time.ParseDuration(cd.StopGrace); err != nil || stop <= g {
		t.Errorf("stop_grace_period %q does not exceed the shutdown grace %v", cd.StopGrace, g)
	}

	// The fake profile runs the fake model, and compactd's default upstream is that service.
	var fakeName string
	var fakePort int
	for name, s := range cf.Services {
		if slices.Contains(s.Profiles, "fake") && len(s.Command) > 0 && s.Command[0] == "fake-upstream" {
			fakeName = name
			i := slices.Index(s.Command, "--listen")
			if i < 0 || i+1 >= len(s.Command) {
				t.Fatalf("%s: fake-upstream without --listen", name)
			}
			fakePort = listenPort(t, s.Command[i+1])
			if s.Image != cd.Image {
				t.Errorf("%s runs image %q, not compactd's %q", name, s.Image, cd.Image)
			}
		}
	}
	if fakeName == "" {
		t.Fatal("no service in the fake profile runs compactd fake-upstream")
	}
	if got, want := interpolate(cd.Environment["COMPACTD_UPSTREAM"]), fmt.Sprintf("http://%s:%d", fakeName, fakePort); got != want {
		t.Errorf("default COMPACTD_UPSTREAM = %q, want the fake service %q", got, want)
	}
	if keys := interpolate(cd.Environment["COMPACTD_KEYS"]); keys != "" {
		t.Error("compose.yaml carries a key")
	}
	// The generated keyring lives on a volume at the data dir, so it survives restarts.
	dataDir := cd.Environment["COMPACTD_DATA_DIR"]
	if !slices.ContainsFunc(cd.Volumes, func(v string) bool { return strings.HasSuffix(v, ":"+dataDir) }) {
		t.Errorf("COMPACTD_DATA_DIR %q is not a volume", dataDir)
	}

	// Prometheus, with the config compose mounts, scrapes compactd by service name on the port
	// that serves /metrics: the ops listener if there is one, else the API port.
	metricsPort := port
	if a := interpolate(cd.Environment["COMPACTD_OPS_LISTEN"]); a != "" {
		metricsPort = listenPort(t, a)
	}
	promFile, ok := mounts["prometheus:/etc/prometheus/prometheus.yml"]
	if !ok {
		t.Fatal("compose does not mount a prometheus.yml")
	}
	var prom promConfig
	readYAML(t, promFile, &prom)
	var scraped bool
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				if target == fmt.Sprintf("compactd:%d", metricsPort) {
					scraped = true
				}
			}
		}
	}
	if !scraped {
		t.Errorf("%s does not scrape compactd:%d", promFile, metricsPort)
	}
	// And the README tells a newcomer the port Prometheus really scrapes.
	if want := fmt.Sprintf("`compactd:%d/metrics`", metricsPort); !strings.Contains(readmeSection(t, "### Docker Compose"), want) {
		t.Errorf("README's Docker Compose section does not say Prometheus scrapes %s", want)
	}
	for _, rf := range prom.RuleFiles {
		if _, ok := mounts["prometheus:"+rf]; !ok {
			t.Errorf("prometheus.yml loads rules from %s, which compose does not mount", rf)
		}
	}

	// Grafana: the data source is the prometheus service; each dashboard provider reads a
	// directory compose mounts, and that holds dashboards.
	grafana := func(dir string) []string {
		t.Helper()
		host, ok := mounts["grafana:"+dir]
		if !ok {
			t.Fatalf("compose does not mount %s into grafana", dir)
		}
		files, _ := filepath.Glob(filepath.Join(host, "*.y*ml"))
		if len(files) == 0 {
			t.Fatalf("no provisioning files in %s", host)
		}
		return files
	}
	for _, f := range grafana("/etc/grafana/provisioning/datasources") {
		var ds struct {
			Datasources []struct {
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		readYAML(t, f, &ds)
		for _, d := range ds.Datasources {
			if d.Type == "prometheus" && d.URL != "http://prometheus:9090" {
				t.Errorf("%s: Prometheus data source at %s, not the prometheus service", f, d.URL)
			}
		}
	}
	var dashboards []string
	for _, f := range grafana("/etc/grafana/provisioning/dashboards") {
		var prov struct {
			Providers []struct {
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		readYAML(t, f, &prov)
		for _, p := range prov.Providers {
			host, ok := mounts["grafana:"+p.Options.Path]
			if !ok {
				t.Errorf("%s: the dashboard provider reads %s, which compose does not mount", f, p.Options.Path)
				continue
			}
			found, _ := filepath.Glob(filepath.Join(host, "*.json"))
			dashboards = append(dashboards, found...)
		}
	}
	if len(dashboards) == 0 {
		t.Error("Grafana is provisioned with no dashboard")
	}
	for _, d := range dashboards {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Title string `json:"title"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.Title == "" {
			t.Errorf("%s is not a dashboard: %v", d, err)
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// readmeSection is the README's text from the heading to the next heading of the same level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading)
	if i < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	s = s[i+1:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if j := strings.Index(s[len(heading):], "\n"+level); j >= 0 {
		s = s[:len(heading)+j]
	}
	return s
}
