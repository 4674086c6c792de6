package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// runningIdemd is the release's idemd started the way the Deployment's
// container starts it, on loopback ports.
type runningIdemd struct {
	grpcAddr, httpAddr string
	token              string
	conn               *grpc.ClientConn
}

// startAsDeployed runs idemd with the Deployment's arguments and
// environment, except what a test machine must change: the listen addresses
// (loopback ports of the test's own), the config file (one tenant with a
// fresh token), the database (a fresh test schema) and, so that a test need
// not wait for them, the sweeper's and the health check's intervals.
func startAsDeployed(t *testing.T, c container) *runningIdemd {
	t.Helper()
	needRelease(t)
	out, err := exec.Command(release.idemd, "token", "new", "--tenant", "deploy").CombinedOutput()
	if err != nil {
		t.Fatalf("idemd token new: %v\n%s", err, out)
	}
	token := regexp.MustCompile(`(?m)^(idem_\S+)$`).FindSubmatch(out)
	hash := regexp.MustCompile(`"(sha256:[0-9a-f]{64})"`).FindSubmatch(out)
	if token == nil || hash == nil {
		t.Fatalf("idemd token new printed no token and hash:\n%s", out)
	}
	dir := t.TempDir()
	configFile := filepath.Join(dir, "config.yaml")
	config := fmt.Sprintf("tenants:\n  - name: deploy\n    tokens: [%q]\n", hash[1])
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	db := testdb.New(t)

	r := &runningIdemd{grpcAddr: freeAddr(t), httpAddr: freeAddr(t), token: string(token[1])}
	override := map[string]string{
		"IDEM_LISTEN":          r.grpcAddr,
		"IDEM_HTTP_LISTEN":     r.httpAddr,
		"IDEM_JSON_LISTEN":     freeAddr(t),
		"IDEM_CONFIG":          configFile,
		"IDEM_DATABASE_URL":    db.URL,
		"IDEM_SWEEP_INTERVAL":  "100ms",
		"IDEM_COUNT_INTERVAL":  "100ms",
		"IDEM_HEALTH_INTERVAL": "100ms",
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	for name, value := range c.env {
		if v, ok := override[name]; ok {
			value = v
		}
		env = append(env, name+"="+value)
	}
	for name, value := range override {
		if _, ok := c.env[name]; !ok {
			env = append(env, name+"="+value)
		}
	}

	cmd := exec.Command(release.idemd, c.args...)
	cmd.Env = env
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if logs.Len() < 1<<16 {
				logs.WriteString(sc.Text() + "\n")
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// Up once /readyz answers 200 (the start-up probe's condition).
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := r.get("/readyz"); code == http.StatusOK {
			break
		}
		select {
		case <-exited:
			t.Fatalf("idemd exited during start-up:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("idemd was not ready after 60s")
		}
	}
	r.conn, err = grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	return r
}

// eventually calls cond every 100ms until it returns true or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// get returns the status and body of GET path on the HTTP listener, or 0
// when it does not answer.
func (r *runningIdemd) get(path string) (int, string) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + r.httpAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestAsDeployed runs idemd as the Deployment does and checks what the
// manifests and the monitoring files expect of it: that every probe gets an
// answer of success, and that every metric the alerts and the dashboard
// read is one it exports.
func TestAsDeployed(t *testing.T) {
	t.Parallel()
	c := idemdContainer(t, readManifests(t))
	r := startAsDeployed(t, c)

	// Like the kubelet, ask each probe until it succeeds: right after start
	// the gRPC health service may not have had its first status yet.
	t.Run("probes", func(t *testing.T) {
		for kind, p := range c.probe {
			var last string
			ok := eventually(15*time.Second, func() bool {
				if path, isHTTP := p.get("httpGet", "path").(string); isHTTP {
					code, body := r.get(path)
					last = fmt.Sprintf("GET %s answered %d %q", path, code, body)
					return code == http.StatusOK
				}
				service, _ := p.get("grpc", "service").(string)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resp, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
				last = fmt.Sprintf("health of %q: %v, %v", service, resp.GetStatus(), err)
				return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
			})
			if !ok {
				t.Errorf("%s never succeeded in 15s: %s", kind, last)
			}
		}
	})

	// Traffic, so that the metrics that appear with their first sample do:
	// claims by outcome, RPC latency, and the records per state.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.token)
	api := idemv1.NewIdempotencyServiceClient(r.conn)
	first, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: "deploy", Key: "job-1"})
	if err != nil || first.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim: %v, %v", first.GetOutcome(), err)
	}
	if _, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: "deploy", Key: "job-1"}); err != nil {
		t.Fatalf("second Claim: %v", err)
	}
	if _, err := api.Complete(ctx, &idemv1.CompleteRequest{Namespace: "deploy", Key: "job-1", Token: first.GetRecord().GetToken()}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// The kubelet's GOMEMLIMIT reached the Go runtime.
	if want, err := goMemLimit(c.env["GOMEMLIMIT"]); err == nil {
		_, body := r.get("/metrics")
		if line := fmt.Sprintf("go_gc_gomemlimit_bytes %g", float64(want)); !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q: GOMEMLIMIT=%s did not take effect", line, c.env["GOMEMLIMIT"])
		}
	}

	var exported map[string]map[string]bool
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := r.get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("GET /metrics: %d %s", code, body)
		}
		exported = parseExposition(body)
		if exported["idem_records"] != nil && exported["idem_claims_total"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s /metrics still lacks idem_records or idem_claims_total:\n%s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("alerts", func(t *testing.T) {
		exprs := alertExprs(t)
		if len(exprs) < 4 {
			t.Fatalf("alerts.yaml has %d rules; want at least 4", len(exprs))
		}
		checkExprs(t, exported, exprs)
	})
	t.Run("dashboard", func(t *testing.T) {
		exprs := dashboardExprs(t)
		if len(exprs) < 10 {
			t.Fatalf("idem.json has %d queries; want at least 10", len(exprs))
		}
		checkExprs(t, exported, exprs)
		checkDashboardCovers(t, exported, exprs)
	})
}

// notOnDashboard are the metrics of idemd's own the dashboard leaves out,
// each with the reason.
var notOnDashboard = map[string]string{
	"idem_sweep_duration_seconds": "the alerts count its passes (IdemSweeperFailing, IdemSweeperNotRunning); the panel Time spent sweeping shows the sweeper's load",
	"idem_db_pool_total_conns":    "pool saturation reads the acquired and the maximum connections",
	"idem_db_pool_idle_conns":     "pool saturation reads the acquired and the maximum connections",
}

// checkDashboardCovers fails for each metric named idem_* that idemd exports
// and the dashboard reads nowhere, unless notOnDashboard says why: a metric
// added to idemd gets a panel or a reason.
func checkDashboardCovers(t *testing.T, exported map[string]map[string]bool, exprs []namedExpr) {
	t.Helper()
	family := func(name string) string {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if exported[base+"_bucket"] != nil {
					return base
				}
			}
		}
		return name
	}
	read := map[string]bool{}
	for _, e := range exprs {
		sels, _ := promqlSelectors(e.expr)
		for _, s := range sels {
			read[family(s.name)] = true
		}
	}
	for name := range exported {
		f := family(name)
		if !strings.HasPrefix(f, "idem_") || read[f] {
			continue
		}
		if _, ok := notOnDashboard[f]; !ok {
			t.Errorf("idemd exports %s and no panel of idem.json reads it: add one, or say why not in notOnDashboard", f)
		}
		read[f] = true // once per family
	}
	for f := range notOnDashboard {
		if exported[f] == nil && exported[f+"_bucket"] == nil {
			t.Errorf("notOnDashboard names %s, which idemd does not export", f)
		}
	}
}

// parseExposition returns the names of the samples in a Prometheus text
// exposition, each with its label names.
func parseExposition(body string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	labelRE := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := line[:end]
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		if line[end] == '{' {
			labels := line[end+1 : strings.LastIndex(line, "}")]
			for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
				out[name][m[1]] = true
			}
		}
	}
	return out
}

// namedExpr is a PromQL expression and where it comes from; label, when
// set, is a label the series it selects must have.
type namedExpr struct{ where, expr, label string }

func alertExprs(t *testing.T) []namedExpr {
	t.Helper()
	data, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Record, Expr string
				For                 string
				Labels, Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("alerts.yaml does not parse as a rule file: %v", err)
	}
	var out []namedExpr
	names := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("alerts.yaml group %s: a rule without alert, expr or summary: %+v", g.Name, r)
			}
			if names[r.Alert] {
				t.Errorf("alerts.yaml: alert %s twice", r.Alert)
			}
			names[r.Alert] = true
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			out = append(out, namedExpr{"alert " + r.Alert, r.Expr, ""})
		}
	}
	return out
}

func dashboardExprs(t *testing.T) []namedExpr {
	t.Helper()
	data, err := os.ReadFile("grafana/idem.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var dash struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("idem.json does not parse: %v", err)
	}
	checkDashboardInputs(t, data)
	if dash.UID == "" || dash.Title == "" {
		t.Error("idem.json has no uid or title")
	}
	var out []namedExpr
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("idem.json: panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("idem.json: panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, namedExpr{fmt.Sprintf("panel %q %s", p.Title, tg.RefID), tg.Expr, ""})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	// A query variable's label_values(selector, label): the selector is
	// PromQL; the label must be one of its series'.
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("idem.json: variable %s queries %q, not label_values(selector, label)", v.Name, q)
			continue
		}
		out = append(out, namedExpr{"variable " + v.Name, m[1], m[2]})
	}
	return out
}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"job", "instance"}

// checkExprs checks that every metric each expression selects is one idemd
// exported, and that its label matchers name labels that metric has.
func checkExprs(t *testing.T, exported map[string]map[string]bool, exprs []namedExpr) {
	t.Helper()
	for _, e := range exprs {
		sels, err := promqlSelectors(e.expr)
		if err != nil {
			t.Errorf("%s: %v: %s", e.where, err, e.expr)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s selects no metric: %s", e.where, e.expr)
		}
		for _, s := range sels {
			if s.name == "" {
				continue // {label!=""}: any metric
			}
			labels, ok := exported[s.name]
			if !ok {
				t.Errorf("%s reads %s, which idemd does not export: %s", e.where, s.name, e.expr)
				continue
			}
			for _, l := range append(s.labels, e.label) {
				if l == "" {
					continue
				}
				if !labels[l] && !slices.Contains(targetLabels, l) {
					t.Errorf("%s matches label %s of %s, which has none: %s", e.where, l, s.name, e.expr)
				}
			}
		}
	}
}

// selector is a metric a PromQL expression reads, with the labels its
// matchers name.
type selector struct {
	name   string
	labels []string
}

// promqlKeywords are identifiers that are not metric names: operators,
// modifiers, and the aggregations, which a by or without clause may separate
// from their parenthesis. Those in groupingKeywords are followed by a list
// of labels.
var (
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end",
		"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
	groupingKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
)

// promqlSelectors returns the vector selectors of a PromQL expression: every
// identifier that is not a function, an aggregation, a keyword or a label,
// with the label names of its matchers. It knows PromQL's lexical rules, not
// its grammar, which is all finding metric names takes.
func promqlSelectors(expr string) ([]selector, error) {
	var out []selector
	i := 0
	skipSpace := func() {
		for i < len(expr) && strings.ContainsRune(" \t\r\n", rune(expr[i])) {
			i++
		}
	}
	isIdentStart := func(b byte) bool { return b == '_' || b == ':' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }
	isIdent := func(b byte) bool { return isIdentStart(b) || '0' <= b && b <= '9' }
	ident := func() string {
		start := i
		for i < len(expr) && isIdent(expr[i]) {
			i++
		}
		return expr[start:i]
	}
	skipString := func() error {
		quote := expr[i]
		for i++; i < len(expr); i++ {
			if expr[i] == '\\' && quote != '`' {
				i++
				continue
			}
			if expr[i] == quote {
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string")
	}
	skipTo := func(end byte) error {
		for ; i < len(expr); i++ {
			if expr[i] == end {
				i++
				return nil
			}
		}
		return fmt.Errorf("no closing %c", end)
	}
	// matchers reads {name op "value", …} and returns the names.
	matchers := func() ([]string, error) {
		var names []string
		i++ // {
		for {
			skipSpace()
			switch {
			case i >= len(expr):
				return nil, fmt.Errorf("no closing }")
			case expr[i] == '}':
				i++
				return names, nil
			case expr[i] == ',':
				i++
			case isIdentStart(expr[i]):
				names = append(names, ident())
				skipSpace()
				if i+1 >= len(expr) || !strings.Contains("=!", expr[i:i+1]) {
					return nil, fmt.Errorf("label %s has no matcher", names[len(names)-1])
				}
				for i < len(expr) && strings.ContainsRune("=!~", rune(expr[i])) {
					i++
				}
				skipSpace()
				if i >= len(expr) || !strings.ContainsRune("\"'`", rune(expr[i])) {
					return nil, fmt.Errorf("label %s's matcher has no string", names[len(names)-1])
				}
				if err := skipString(); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("unexpected %q in a selector", expr[i])
			}
		}
	}
	depth := 0
	for i < len(expr) {
		b := expr[i]
		switch {
		case strings.ContainsRune(" \t\r\n", rune(b)):
			i++
		case b == '"' || b == '\'' || b == '`':
			if err := skipString(); err != nil {
				return nil, err
			}
		case b == '[': // a range or a subquery's range
			if err := skipTo(']'); err != nil {
				return nil, err
			}
		case b == '{':
			labels, err := matchers()
			if err != nil {
				return nil, err
			}
			out = append(out, selector{labels: labels})
		case b == '$': // a Grafana variable outside a string
			i++
			if i < len(expr) && expr[i] == '{' {
				if err := skipTo('}'); err != nil {
					return nil, err
				}
			} else {
				ident()
			}
		case '0' <= b && b <= '9' || b == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(b):
			name := ident()
			skipSpace()
			next := byte(0)
			if i < len(expr) {
				next = expr[i]
			}
			switch {
			case slices.Contains(groupingKeywords, name):
				if next == '(' {
					if err := skipTo(')'); err != nil {
						return nil, err
					}
				}
			case slices.Contains(promqlKeywords, strings.ToLower(name)):
			case next == '(': // a function or an aggregation
			default:
				s := selector{name: name}
				if next == '{' {
					labels, err := matchers()
					if err != nil {
						return nil, err
					}
					s.labels = labels
				}
				out = append(out, s)
			}
		case b == '(':
			depth++
			i++
		case b == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced )")
			}
			i++
		default: // operators and commas
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced (")
	}
	return out, nil
}

func TestPromQLSelectors(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		`sum by (outcome) (rate(idem_claims_total{job=~"$job", outcome!="x"}[$__rate_interval]))`:     `idem_claims_total{job,outcome}`,
		`histogram_quantile(0.99, sum without (grpc_code) (rate(a_bucket{s="}"}[5m:1m]))) > bool 1e3`: `a_bucket{s}`,
		`x / on(instance) group_left(state) y{state="a"} offset 5m and z or count({k!=""})`:           `x y{state} z {k}`,
		`sum(rate(a[1m])) by (job) unless b`:                                                          `a b`,
	} {
		sels, err := promqlSelectors(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			if len(s.labels) > 0 {
				got = append(got, s.name+"{"+strings.Join(s.labels, ",")+"}")
			} else {
				got = append(got, s.name)
			}
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%s: got %q, want %q", expr, strings.Join(got, " "), want)
		}
	}
	for _, bad := range []string{`rate(x[5m]`, `x{a="b"`, `x{a}`, `x{a="b}`} {
		if _, err := promqlSelectors(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// checkDashboardInputs checks what Grafana's import reads of idem.json: an
// __inputs block that asks for a Prometheus data source, and every
// ${DS_…} placeholder in the file naming one of its inputs, which the
// import replaces with the data source chosen.
func checkDashboardInputs(t *testing.T, data []byte) {
	t.Helper()
	var dash struct {
		Inputs []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("idem.json does not parse: %v", err)
	}
	inputs := map[string]bool{}
	for _, in := range dash.Inputs {
		if in.Type != "datasource" || in.PluginID != "prometheus" {
			t.Errorf("idem.json: input %s is a %s of %s; want a prometheus datasource", in.Name, in.Type, in.PluginID)
		}
		inputs[in.Name] = true
	}
	if len(inputs) != 1 {
		t.Errorf("idem.json has %d __inputs; want one, the Prometheus data source import asks for", len(inputs))
	}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{(DS_[A-Z0-9_]+)\}`).FindAllSubmatch(data, -1) {
		name := string(m[1])
		if !inputs[name] {
			t.Errorf("idem.json uses ${%s}, which __inputs does not declare", name)
		}
		used[name] = true
	}
	for name := range inputs {
		if !used[name] {
			t.Errorf("idem.json declares the input %s and uses it nowhere: import would ask for it and drop the answer", name)
		}
	}
}
