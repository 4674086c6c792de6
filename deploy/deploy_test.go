// Package deploy_test checks the files in deploy/ against the idemd they
// deploy: the binaries that `make release` builds (static, stamped, with
// checksums) are the ones the tests run; the Dockerfile, the systemd unit and
// the Kubernetes manifests name only flags, environment variables, ports and
// endpoints idemd has; and every metric the dashboard and the alerts read is
// one a running idemd exports.
package deploy_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// testVersion is the version the test release is stamped with.
const testVersion = "v0.0.0-deploytest"

// release is what TestMain's `make release` for this machine's platform
// built: the binaries every test that runs idemd uses.
var release struct {
	dir          string
	idemd, idem  string
	output       string
	err          error
	flagsOnce    sync.Once
	flags, envs  map[string]bool
	valueFlags   map[string]bool
	flagsErr     error
	helpOutput   string
	hostPlatform string
	sdks         []string // the SDK packages the release carries
}

// sdkArtifacts are the files each SDK package adds to a release of testVersion.
var sdkArtifacts = map[string][]string{
	"python":     {"idem_client-0.0.0+deploytest-py3-none-any.whl", "idem_client-0.0.0+deploytest.tar.gz"},
	"typescript": {"idemhq-idem-0.0.0-deploytest.tgz"},
}

// releaseSDKs is the SDK packages the test release builds: each whose tool
// (python3, npm) is here. With CI=true both must be: a CI run that left them
// out would not test what a release ships.
func releaseSDKs() []string {
	var sdks []string
	for _, s := range []struct{ name, tool string }{{"python", "python3"}, {"typescript", "npm"}} {
		if _, err := exec.LookPath(s.tool); err == nil || os.Getenv("CI") == "true" {
			sdks = append(sdks, s.name)
		} else {
			fmt.Fprintf(os.Stderr, "NOTICE: %s not found: the test release leaves out the %s package\n", s.tool, s.name)
		}
	}
	return sdks
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-release-test")
	if err != nil {
		panic(err)
	}
	release.dir = dir
	release.hostPlatform = runtime.GOOS + "_" + runtime.GOARCH
	release.idemd = filepath.Join(dir, "idemd_"+testVersion+"_"+release.hostPlatform)
	release.idem = filepath.Join(dir, "idem_"+testVersion+"_"+release.hostPlatform)
	release.sdks = releaseSDKs()
	cmd := exec.Command("make", "-C", "..", "--no-print-directory", "release",
		"RELEASE_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH, "DIST="+dir, "VERSION="+testVersion,
		"RELEASE_SDKS="+strings.Join(release.sdks, " "))
	out, err := cmd.CombinedOutput()
	release.output, release.err = string(out), err
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needRelease fails the test when TestMain's `make release` did.
func needRelease(t *testing.T) {
	t.Helper()
	if release.err != nil {
		t.Fatalf("make release for %s: %v\n%s", release.hostPlatform, release.err, release.output)
	}
}

// serveFlags returns the flags and environment variables `idemd serve`
// accepts, read from its --help, and which of the flags take a value.
func serveFlags(t *testing.T) (flags, envs, valueFlags map[string]bool) {
	t.Helper()
	needRelease(t)
	release.flagsOnce.Do(func() {
		out, err := exec.Command(release.idemd, "serve", "--help").CombinedOutput()
		if err != nil {
			release.flagsErr = fmt.Errorf("idemd serve --help: %v\n%s", err, out)
			return
		}
		release.helpOutput = string(out)
		release.flags, release.envs, release.valueFlags = map[string]bool{}, map[string]bool{}, map[string]bool{}
		// "      --listen="127.0.0.1:7070"  Address …", "  --[no-]migrate", "  --pprof"
		flagRE := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--(\[no-\])?([a-z0-9-]+)(=)?`)
		for _, m := range flagRE.FindAllStringSubmatch(release.helpOutput, -1) {
			release.flags[m[2]] = true
			if m[1] != "" {
				release.flags["no-"+m[2]] = true
			}
			if m[3] != "" {
				release.valueFlags[m[2]] = true
			}
		}
		for _, m := range regexp.MustCompile(`\(\$(IDEM_[A-Z0-9_]+)\)`).FindAllStringSubmatch(release.helpOutput, -1) {
			release.envs[m[1]] = true
		}
	})
	if release.flagsErr != nil {
		t.Fatal(release.flagsErr)
	}
	for _, want := range []string{"listen", "http-listen", "config", "database-url"} {
		if !release.flags[want] || !release.valueFlags[want] {
			t.Fatalf("reading idemd serve --help found no --%s=…; the parser is out of date:\n%s", want, release.helpOutput)
		}
	}
	if !release.envs["IDEM_LISTEN"] {
		t.Fatalf("reading idemd serve --help found no $IDEM_LISTEN; the parser is out of date:\n%s", release.helpOutput)
	}
	return release.flags, release.envs, release.valueFlags
}

// checkServeArgs checks that args (what follows `idemd`) run `serve` with
// flags idemd accepts, and returns the flags' values.
func checkServeArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	flags, _, valueFlags := serveFlags(t)
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: idemd's arguments %q do not start with serve", where, args)
	}
	values := map[string]string{}
	for i := 1; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Errorf("%s: %q is not a flag; serve takes no arguments", where, args[i])
			continue
		}
		name, value, hasValue := strings.Cut(name, "=")
		if !flags[name] {
			t.Errorf("%s: idemd serve has no flag --%s", where, name)
			continue
		}
		if valueFlags[name] && !hasValue {
			if i+1 >= len(args) {
				t.Errorf("%s: --%s needs a value", where, name)
				continue
			}
			i++
			value = args[i]
		}
		values[name] = value
	}
	return values
}

// goRuntimeEnv are the environment variables the Go runtime reads in idemd.
var goRuntimeEnv = []string{"GOMEMLIMIT", "GOGC", "GOMAXPROCS", "GODEBUG"}

// checkEnv checks that name is an environment variable idemd serve or the
// Go runtime in it reads.
func checkEnv(t *testing.T, where, name string) {
	t.Helper()
	if slices.Contains(goRuntimeEnv, name) {
		return
	}
	_, envs, _ := serveFlags(t)
	if !envs[name] {
		t.Errorf("%s: idemd serve reads no environment variable %s", where, name)
	}
}

// port returns the port of a listen address such as ":7070".
func port(t *testing.T, where, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: listen address %q: %v", where, addr, err)
	}
	return p
}

func TestReleaseBuildsStaticStampedBinariesWithChecksums(t *testing.T) {
	needRelease(t)
	entries, err := os.ReadDir(release.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"SHA256SUMS", filepath.Base(release.idem), filepath.Base(release.idemd)}
	for _, sdk := range release.sdks {
		want = append(want, sdkArtifacts[sdk]...)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("dist holds %q, want %q", names, want)
	}

	sums, err := os.ReadFile(filepath.Join(release.dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not \"<sha256>  <file>\"", line)
		}
		listed[name] = sum
	}
	for _, name := range want[1:] {
		bin := filepath.Join(release.dir, name)
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		got := sha256.Sum256(data)
		if sum := listed[name]; sum != hex.EncodeToString(got[:]) {
			t.Errorf("SHA256SUMS has %q for %s; its SHA-256 is %x", sum, name, got)
		}
		if runtime.GOOS == "linux" && (bin == release.idemd || bin == release.idem) {
			checkStatic(t, bin)
		}
	}
	if len(listed) != len(want)-1 {
		t.Errorf("SHA256SUMS lists %d files, want the %d others of dist:\n%s", len(listed), len(want)-1, sums)
	}

	// Both binaries are stamped: "NAME VERSION (commit …, go…, os/arch)".
	for name, bin := range map[string]string{"idemd": release.idemd, "idem": release.idem} {
		out, err := exec.Command(bin, "version").CombinedOutput()
		if want := name + " " + testVersion + " ("; err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s version: %q, %v; want it to start with %q", name, out, err, want)
		}
	}
}

// checkStatic fails unless the ELF binary at path is statically linked: no
// program interpreter and no shared libraries, so it runs on an image with
// no libc.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: it is linked dynamically (built without CGO_ENABLED=0?)", filepath.Base(path))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", filepath.Base(path), libs)
	}
}

// TestReleaseCoversEveryPlatform reads what `make release` would run: a
// static, stamped build of both binaries for linux and darwin, amd64 and
// arm64, and the checksums.
func TestReleaseCoversEveryPlatform(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("make", "-C", "..", "--no-print-directory", "-n", "release", "VERSION=v1.2.3", "DIST=out")
	// The Makefile's defaults, not the caller's: neither from the
	// environment nor from the variables an outer make (make test) passes
	// down in MAKEFLAGS.
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"RELEASE_PLATFORMS", "DIST", "VERSION", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}, name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, out)
	}
	buildRE := regexp.MustCompile(`^CGO_ENABLED=0 GOOS=(\w+) GOARCH=(\w+) go build -trimpath -ldflags "[^"]*-X main\.version=v1\.2\.3[^"]*" -o "out/(\w+)_v1\.2\.3_(\w+)" \./cmd/(\w+)$`)
	built := map[string]bool{}
	var checksums bool
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "go build") {
			m := buildRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("make release runs %q; want a CGO_ENABLED=0 -trimpath build stamped with VERSION into DIST", line)
				continue
			}
			if m[3] != m[5] || m[4] != m[1]+"_"+m[2] {
				t.Errorf("make release builds ./cmd/%s for %s/%s as %s_%s", m[5], m[1], m[2], m[3], m[4])
			}
			built[m[5]+" "+m[1]+"/"+m[2]] = true
		}
		if strings.Contains(line, "SHA256SUMS") && strings.Contains(line, "sha") {
			checksums = true
		}
	}
	for _, cmd := range []string{"idemd", "idem"} {
		for _, platform := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
			if !built[cmd+" "+platform] {
				t.Errorf("make release does not build %s for %s:\n%s", cmd, platform, out)
			}
		}
	}
	if len(built) != 8 {
		t.Errorf("make release runs %d builds, want 8:\n%s", len(built), out)
	}
	if !checksums {
		t.Errorf("make release writes no SHA256SUMS:\n%s", out)
	}
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct {
	cmd, args string
}

func readDockerfile(t *testing.T) [][]dockerInstruction {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]dockerInstruction
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
			}
			return
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := readDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and the image", len(stages))
	}

	goMod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	var builds int
	args := map[string]bool{}
	for _, in := range stages[0] {
		switch {
		case in.cmd == "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			args[name] = true
		case in.cmd == "FROM":
			if !strings.Contains(in.args, "golang:"+string(goVersion[1])+"-") && !strings.Contains(in.args, "golang:"+string(goVersion[1])+" ") {
				t.Errorf("the build stage is FROM %s; go.mod asks for Go %s", in.args, goVersion[1])
			}
		case in.cmd == "RUN" && strings.Contains(in.args, "go build"):
			builds++
			if !strings.Contains(in.args, "CGO_ENABLED=0 ") {
				t.Errorf("the Dockerfile builds without CGO_ENABLED=0, so the binaries need a libc the image does not have: %s", in.args)
			}
			for _, pkg := range []string{"./cmd/idemd", "./cmd/idem"} {
				if !slices.Contains(strings.Fields(in.args), pkg) {
					t.Errorf("the Dockerfile's build leaves out %s: %s", pkg, in.args)
				}
			}
			for _, stamp := range []string{"-X main.version=${VERSION}", "-X main.commit=${COMMIT}"} {
				if !strings.Contains(in.args, stamp) {
					t.Errorf("the Dockerfile's build does not stamp %s: %s", stamp, in.args)
				}
			}
		}
	}
	if builds != 1 {
		t.Errorf("the build stage runs go build %d times, want once", builds)
	}
	for _, arg := range []string{"VERSION", "COMMIT"} {
		if !args[arg] {
			t.Errorf("the build stage has no ARG %s for docker build --build-arg", arg)
		}
	}

	var entrypoint, command []string
	var user string
	env := map[string]string{}
	var exposed []string
	for _, in := range stages[1] {
		switch in.cmd {
		case "RUN":
			t.Errorf("the image stage runs %q: the image has no shell", in.args)
		case "USER":
			user = in.args
		case "ENTRYPOINT", "CMD":
			var list []string
			if err := yaml.Unmarshal([]byte(in.args), &list); err != nil || !strings.HasPrefix(in.args, "[") {
				t.Errorf("%s %s is not in exec form (a JSON array): the image has no shell to run it", in.cmd, in.args)
			}
			if in.cmd == "ENTRYPOINT" {
				entrypoint = list
			} else {
				command = list
			}
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Errorf("ENV %s: write NAME=value", in.args)
				}
				env[k] = v
			}
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(in.args)...)
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("the image runs as user %q; want a non-root user", user)
	}
	if len(entrypoint) != 1 || filepath.Base(entrypoint[0]) != "idemd" {
		t.Errorf("ENTRYPOINT is %q, want idemd", entrypoint)
	}
	checkServeArgs(t, "Dockerfile CMD", command)
	for k := range env {
		checkEnv(t, "Dockerfile ENV", k)
	}
	var ports []string
	for _, name := range []string{"IDEM_LISTEN", "IDEM_HTTP_LISTEN", "IDEM_JSON_LISTEN"} {
		addr, ok := env[name]
		if !ok {
			t.Errorf("the image leaves %s at its loopback default, which nothing outside the container reaches", name)
			continue
		}
		ports = append(ports, port(t, "Dockerfile ENV "+name, addr))
	}
	slices.Sort(ports)
	slices.Sort(exposed)
	if !slices.Equal(ports, exposed) {
		t.Errorf("the image EXPOSEs %v; idemd listens on %v", exposed, ports)
	}
}

// manifest is one Kubernetes object, as generic YAML.
type manifest map[string]any

func (m manifest) kind() string { s, _ := m["kind"].(string); return s }

// get walks a path of map keys and list indexes.
func (m manifest) get(path ...any) any {
	var v any = map[string]any(m)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, _ := v.(map[string]any)
			v = mm[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// readManifests is what kubectl apply -k would send to a cluster with the
// Prometheus Operator: deploy/kubernetes with the component monitoring/,
// rendered by kustomize.
func readManifests(t *testing.T) map[string]manifest {
	t.Helper()
	return kustomizeBuild(t, withMonitoring(t))
}

// container is what the tests read of the Deployment's idemd container.
type container struct {
	args []string
	// env has the literal values, a resourceFieldRef's as the kubelet
	// gives it, and "" for the rest of valueFrom.
	env   map[string]string
	limit map[string]string // resources.limits
	ports map[string]int    // by name
	probe map[string]manifest
}

func idemdContainer(t *testing.T, objects map[string]manifest) container {
	t.Helper()
	dep := objects["Deployment/idemd"]
	if dep == nil {
		t.Fatal("kubernetes/ has no Deployment idemd")
	}
	c, _ := dep.get("spec", "template", "spec", "containers", 0).(map[string]any)
	if c == nil {
		t.Fatal("the Deployment has no container")
	}
	cm := manifest(c)
	out := container{env: map[string]string{}, limit: map[string]string{}, ports: map[string]int{}, probe: map[string]manifest{}}
	for _, a := range cm["args"].([]any) {
		out.args = append(out.args, a.(string))
	}
	limits, _ := cm.get("resources", "limits").(map[string]any)
	for name, v := range limits {
		out.limit[name] = fmt.Sprint(v)
	}
	for _, e := range cm["env"].([]any) {
		em := manifest(e.(map[string]any))
		v, _ := em["value"].(string)
		if ref, ok := em.get("valueFrom", "resourceFieldRef").(map[string]any); ok {
			v = resourceField(t, cm, out.limit, manifest(ref))
		}
		out.env[em["name"].(string)] = v
	}
	for _, p := range cm["ports"].([]any) {
		pm := manifest(p.(map[string]any))
		out.ports[pm["name"].(string)] = pm["containerPort"].(int)
	}
	for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if p, ok := cm[kind].(map[string]any); ok {
			out.probe[kind] = manifest(p)
		}
	}
	return out
}

// resourceField is the value the downward API gives an environment variable
// with resourceFieldRef ref in container c: the resource's quantity over the
// divisor (1 by default), rounded up, as a plain integer.
func resourceField(t *testing.T, c manifest, limits map[string]string, ref manifest) string {
	t.Helper()
	if name, ok := ref["containerName"]; ok && name != c["name"] {
		t.Fatalf("resourceFieldRef names container %v, not its own %v", name, c["name"])
	}
	resource, _ := ref["resource"].(string)
	name, ok := strings.CutPrefix(resource, "limits.")
	if !ok {
		t.Fatalf("resourceFieldRef %q: the test knows limits.* only", resource)
	}
	q, ok := limits[name]
	if !ok {
		t.Fatalf("resourceFieldRef %q: the container sets no such limit, and the kubelet would give the node's allocatable instead", resource)
	}
	divisor := int64(1)
	if d, ok := ref["divisor"]; ok {
		divisor = quantity(t, fmt.Sprint(d))
	}
	v := quantity(t, q)
	return strconv.FormatInt((v+divisor-1)/divisor, 10)
}

// quantity parses a Kubernetes quantity of whole units: 512Mi, 1G, 1000.
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("quantity %q: the test knows whole numbers with a suffix of Ki, Mi, Gi, Ti, k, M, G or T", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: %v", s, err)
	}
	unit := map[string]int64{"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m[2]]
	return n * unit
}

// goMemLimit parses a GOMEMLIMIT as the Go runtime does: a count of bytes,
// with no unit or one of B, KiB, MiB, GiB and TiB.
func goMemLimit(s string) (int64, error) {
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q is not a count of bytes with no unit or one of B, KiB, MiB, GiB and TiB", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q: %w", s, err)
	}
	return n * map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m[2]], nil
}

// servedPaths are the paths idemd serves on --http-listen (cmd/idemd/http.go).
var servedPaths = []string{"/metrics", "/healthz", "/readyz"}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objects := readManifests(t)
	for _, want := range []string{"Deployment/idemd", "Service/idemd", "ServiceMonitor/idemd"} {
		if objects[want] == nil {
			t.Errorf("kubernetes/ has no %s", want)
		}
	}
	dep := objects["Deployment/idemd"]
	c := idemdContainer(t, objects)
	checkServeArgs(t, "Deployment args", c.args)
	for name := range c.env {
		checkEnv(t, "Deployment env", name)
	}

	// Each listener's port is the container port of that name.
	listeners := map[string]string{"grpc": "IDEM_LISTEN", "http": "IDEM_HTTP_LISTEN", "json": "IDEM_JSON_LISTEN"}
	for portName, env := range listeners {
		addr, ok := c.env[env]
		if !ok {
			t.Errorf("the Deployment leaves %s at its loopback default, which no probe or Service reaches", env)
			continue
		}
		if p := port(t, "Deployment "+env, addr); fmt.Sprint(c.ports[portName]) != p {
			t.Errorf("container port %s is %d; %s listens on %s", portName, c.ports[portName], env, p)
		}
	}
	if c.env["IDEM_CONFIG"] == "" {
		t.Error("the Deployment sets no IDEM_CONFIG: on a non-loopback address idemd refuses to start without one")
	}

	// The Go runtime's memory limit is the container's or a little below
	// it: above, the kernel kills the pod before the collector works harder;
	// far below, the collector runs all the time.
	if lim, ok := c.limit["memory"]; !ok {
		t.Error("the Deployment sets no memory limit for GOMEMLIMIT to follow")
	} else if got, err := goMemLimit(c.env["GOMEMLIMIT"]); err != nil {
		t.Errorf("the Deployment's GOMEMLIMIT: %v", err)
	} else if limit := quantity(t, lim); got > limit || got < limit/2 {
		t.Errorf("GOMEMLIMIT is %d bytes; want at most the container's memory limit, %d (%s), and at least half of it", got, limit, lim)
	}

	// Probes: HTTP ones on the http port at a path idemd serves, the gRPC one
	// on the gRPC port for a service idemd's health service reports.
	var httpProbes, grpcProbes int
	for kind, p := range c.probe {
		if hg, ok := p["httpGet"].(map[string]any); ok {
			httpProbes++
			if path, _ := hg["path"].(string); !slices.Contains(servedPaths, path) {
				t.Errorf("%s asks for %v; idemd serves %v", kind, hg["path"], servedPaths)
			}
			if hg["port"] != "http" && hg["port"] != c.ports["http"] {
				t.Errorf("%s asks port %v, not the http port", kind, hg["port"])
			}
		}
		if g, ok := p["grpc"].(map[string]any); ok {
			grpcProbes++
			if g["port"] != c.ports["grpc"] {
				t.Errorf("%s asks port %v; gRPC is on %d (a gRPC probe takes a number, not a port name)", kind, g["port"], c.ports["grpc"])
			}
			if s, _ := g["service"].(string); s != "" && s != "idem.v1.IdempotencyService" {
				t.Errorf("%s asks for health of %q; idemd reports \"\" and idem.v1.IdempotencyService", kind, s)
			}
		}
	}
	if httpProbes == 0 || grpcProbes == 0 {
		t.Errorf("the Deployment has %d HTTP and %d gRPC probes; want both kinds", httpProbes, grpcProbes)
	}
	if path, _ := c.probe["livenessProbe"].get("httpGet", "path").(string); path != "/healthz" {
		t.Errorf("the liveness probe asks %q; /healthz is the one that does not restart pods for a database outage", path)
	}

	// The Deployment's selector picks its pods; the Service's selects them too
	// and forwards to ports they have; the ServiceMonitor scrapes /metrics
	// through the Service's port for the http container port.
	podLabels, _ := dep.get("spec", "template", "metadata", "labels").(map[string]any)
	if !subset(dep.get("spec", "selector", "matchLabels"), podLabels) {
		t.Error("the Deployment's selector does not match its pod template's labels")
	}
	svc := objects["Service/idemd"]
	if !subset(svc.get("spec", "selector"), podLabels) {
		t.Error("the Service's selector does not match the pods' labels")
	}
	svcTarget := map[string]any{}
	for _, p := range svc.get("spec", "ports").([]any) {
		pm := p.(map[string]any)
		target := pm["targetPort"]
		if name, ok := target.(string); ok {
			if _, ok := c.ports[name]; !ok {
				t.Errorf("Service port %v targets %q, which the container does not have", pm["name"], name)
			}
		}
		svcTarget[pm["name"].(string)] = target
	}
	sm := objects["ServiceMonitor/idemd"]
	svcLabels, _ := svc.get("metadata", "labels").(map[string]any)
	if !subset(sm.get("spec", "selector", "matchLabels"), svcLabels) {
		t.Error("the ServiceMonitor's selector does not match the Service's labels")
	}
	for _, e := range sm.get("spec", "endpoints").([]any) {
		em := e.(map[string]any)
		if target := svcTarget[fmt.Sprint(em["port"])]; target != "http" && target != c.ports["http"] {
			t.Errorf("the ServiceMonitor scrapes Service port %v, which leads to %v, not the http port", em["port"], target)
		}
		if path, ok := em["path"]; ok && path != "/metrics" {
			t.Errorf("the ServiceMonitor scrapes %v, not /metrics", path)
		}
	}
}

// subset reports whether the map sel is non-empty and each of its entries
// is in labels.
func subset(sel any, labels map[string]any) bool {
	m, _ := sel.(map[string]any)
	if len(m) == 0 {
		return false
	}
	for k, v := range m {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestMakeVersion runs `make version` in git repositories of its own: the
// nearest v* tag when there is one, else the commit's Go pseudo-version,
// +dirty (-dirty after a tag, as git describe writes it) with uncommitted
// changes, and devel outside a checkout.
func TestMakeVersion(t *testing.T) {
	t.Parallel()
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), makefile, 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"VERSION", "COMMIT", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}, name) && !strings.HasPrefix(name, "GIT_") {
			env = append(env, kv)
		}
	}
	env = append(env, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
	sh := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() string { t.Helper(); return sh("make", "-s", "--no-print-directory", "version") }

	if v := version(); v != "devel" {
		t.Errorf("outside a git checkout make version prints %q, want devel", v)
	}
	sh("git", "init", "-q")
	sh("git", "add", "Makefile")
	sh("git", "commit", "-q", "-m", "first")
	hash := sh("git", "rev-parse", "HEAD")
	if v, want := version(), "v0.0.0-20260102030405-"+hash[:12]; v != want {
		t.Errorf("before the first tag make version prints %q, want the pseudo-version %q", v, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), append(makefile, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, want := version(), "v0.0.0-20260102030405-"+hash[:12]+"+dirty"; v != want {
		t.Errorf("with a change make version prints %q, want %q", v, want)
	}
	sh("git", "checkout", "-q", "Makefile")
	sh("git", "tag", "v1.2.3")
	sh("git", "tag", "not-a-version")
	if v := version(); v != "v1.2.3" {
		t.Errorf("on the tag v1.2.3 make version prints %q", v)
	}
}

// fakeGo stands in for the go command in TestMakeRunShowsBuildProgress
// and TestMakeInstallSaysWhere: go list -deps names 40 packages, and go
// build -v names them as it "compiles" them (pausing FAKE_GO_PAUSE seconds
// after the 12th), then fails with a compiler's error when FAKE_GO_FAIL is
// set, or else writes, for each ./cmd/NAME, a NAME that prints its
// arguments: into the directory -o names when it ends in /, as go build
// does. go install writes them into $GOBIN, or the bin of GOPATH's first
// directory, and go env prints those two variables.
const fakeGo = `#!/bin/sh
fake() { mkdir -p "$(dirname "$1")" && printf '#!/bin/sh\necho "%s $*"\n' "$(basename "$1")" > "$1" && chmod +x "$1"; }
case "$1" in
list) i=1; while [ $i -le 40 ]; do echo "example.com/p$i"; i=$((i+1)); done ;;
build)
  i=1; while [ $i -le 40 ]; do
    echo "example.com/p$i" >&2
    [ $i -eq 12 ] && sleep "${FAKE_GO_PAUSE:-0}"
    i=$((i+1))
  done
  if [ -n "$FAKE_GO_FAIL" ]; then echo "cmd/idemd/main.go:3:1: syntax error: unexpected }" >&2; exit 2; fi
  cmds=
  while [ $# -gt 0 ]; do
    case "$1" in -o) out=$2; shift ;; ./cmd/*) cmds="$cmds ${1#./cmd/}" ;; esac
    shift
  done
  case "$out" in
  */) for c in $cmds; do fake "$out$c"; done ;;
  *) fake "$out" ;;
  esac ;;
install)
  dir=$GOBIN; [ -n "$dir" ] || dir=${GOPATH%%:*}/bin
  for a in "$@"; do case "$a" in ./cmd/*) fake "$dir/${a#./cmd/}" ;; esac; done ;;
env) eval "echo \"\${$2}\"" ;;
*) echo "fake go: $*" >&2; exit 1 ;;
esac
`

// makeWithFakeGo copies the Makefile into a new directory and returns a
// function that runs make there with fakeGo first on the PATH, the
// environment's make, IDEM_DATABASE_URL, GOBIN and GOPATH left out, and
// the variables extra adds (a PATH of its own goes after fakeGo's).
func makeWithFakeGo(t *testing.T) (dir string, run func(target string, extra ...string) (string, error)) {
	t.Helper()
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	dir, bin := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), makefile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"PATH", "IDEM_DATABASE_URL", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GOBIN", "GOPATH"}, name) {
			env = append(env, kv)
		}
	}
	return dir, func(target string, extra ...string) (string, error) {
		path := os.Getenv("PATH")
		vars := slices.Clone(env)
		for _, kv := range extra {
			if p, ok := strings.CutPrefix(kv, "PATH="); ok {
				path = p
			} else {
				vars = append(vars, kv)
			}
		}
		cmd := exec.Command("make", "--no-print-directory", target)
		cmd.Dir, cmd.Env = dir, append(vars, "PATH="+bin+string(os.PathListSeparator)+path)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// TestMakeRunShowsBuildProgress runs `make run` with a go command that
// compiles slowly: make run says how far the build has got, at every tenth
// of the packages and while one takes long, passes the compiler's errors
// through and fails with them, and once idemd and idem are built, runs
// idemd.
func TestMakeRunShowsBuildProgress(t *testing.T) {
	t.Parallel()
	dir, makeIn := makeWithFakeGo(t)
	makeRun := func(extra ...string) (string, error) {
		return makeIn("run", append([]string{"BUILD_PROGRESS_EVERY=1"}, extra...)...)
	}

	out, err := makeRun("FAKE_GO_PAUSE=8")
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	for _, want := range []string{
		"make run: building idemd and idem into bin/ (the first build compiles some 40 packages",
		"make run: compiling 1 of about 40 packages: example.com/p1\n",
		"make run: compiling 6 of about 40 packages: example.com/p6\n",
		"make run: still building: 12 of about 40 packages begun, the last example.com/p12\n",
		"make run: compiled 40 packages\n",
		"\nidemd serve\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("make run's output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "packages: example.com/"); n < 7 || n > 11 {
		t.Errorf("make run printed %d progress lines for 40 packages; want one at each tenth:\n%s", n, out)
	}
	// The README's walkthrough uses bin/idem, the CLI, beside the idemd that make run runs.
	for _, name := range []string{"idemd", "idem"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", name)); err != nil {
			t.Errorf("make run did not build bin/%s: %v", name, err)
		}
	}

	out, err = makeRun("FAKE_GO_FAIL=1")
	if err == nil || !strings.Contains(out, "cmd/idemd/main.go:3:1: syntax error: unexpected }\n") || strings.Contains(out, "idemd serve") {
		t.Errorf("make run with a build that fails: %v; want the compiler's error, a failure, and no idemd:\n%s", err, out)
	}
}

// TestMakeInstallSaysWhere runs `make install` with a go command that
// installs where the real one does: make install says which directory it
// put idemd and idem in, whether that directory is on the PATH, the line
// that puts it there when it is not, and which binary runs instead when
// another build of idemd or idem comes before it on the PATH (not when it
// is the same build, as make run's bin/ holds).
func TestMakeInstallSaysWhere(t *testing.T) {
	t.Parallel()
	_, makeIn := makeWithFakeGo(t)
	tmp := t.TempDir()
	gobin, gopath := filepath.Join(tmp, "gobin"), filepath.Join(tmp, "gopath")
	system := os.Getenv("PATH")
	install := func(extra ...string) string {
		t.Helper()
		out, err := makeIn("install", extra...)
		if err != nil {
			t.Fatalf("make install %q: %v\n%s", extra, err, out)
		}
		return out
	}

	out := install("GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+system)
	if want := "make install: idemd and idem are in " + gobin + ", which is on your PATH\n"; !strings.HasSuffix(out, want) {
		t.Errorf("GOBIN on the PATH: make install ends with\n%s\nwant it to end with\n%s", out, want)
	}
	for _, name := range []string{"idemd", "idem"} {
		if _, err := os.Stat(filepath.Join(gobin, name)); err != nil {
			t.Errorf("the fake go install wrote no %s: %v", name, err)
		}
	}

	first := filepath.Join(gopath, "bin")
	out = install("GOPATH="+gopath+string(os.PathListSeparator)+filepath.Join(tmp, "other"), "PATH="+system)
	want := "make install: idemd and idem are in " + first + ", which is not on your PATH; to run them by name, add it:\n" +
		"  export PATH=\"" + first + ":$PATH\"\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("no GOBIN, GOPATH/bin not on the PATH: make install ends with\n%s\nwant it to end with\n%s", out, want)
	}

	older := filepath.Join(tmp, "older")
	if err := os.MkdirAll(older, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(older, "idemd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out = install("GOBIN="+gobin, "PATH="+older+string(os.PathListSeparator)+gobin+string(os.PathListSeparator)+system)
	want = "make install: idemd and idem are in " + gobin + ", which is on your PATH\n" +
		"make install: but `idemd` runs " + filepath.Join(older, "idemd") + ", another build, which comes first on your PATH; remove it, or put " + gobin + " before it\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("another idemd first on the PATH: make install ends with\n%s\nwant it to end with\n%s", out, want)
	}

	same, err := os.ReadFile(filepath.Join(gobin, "idemd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(older, "idemd"), same, 0o755); err != nil {
		t.Fatal(err)
	}
	out = install("GOBIN="+gobin, "PATH="+older+string(os.PathListSeparator)+gobin+string(os.PathListSeparator)+system)
	if want := "make install: idemd and idem are in " + gobin + ", which is on your PATH\n"; !strings.HasSuffix(out, want) {
		t.Errorf("the same build of idemd first on the PATH: make install ends with\n%s\nwant it to end with\n%s", out, want)
	}
}
