package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// kustomizeVersion is the kustomize the tests run through the Go module
// proxy when there is no kustomize on PATH: the one kubectl 1.32 embeds.
const kustomizeVersion = "v5.5.0"

var kustomizeCmd struct {
	once sync.Once
	args []string
}

// kustomize returns the command that runs kustomize: the kustomize on PATH,
// or else `go run` of kustomizeVersion (compiled once, then cached by the
// go command).
func kustomize() []string {
	kustomizeCmd.once.Do(func() {
		if path, err := exec.LookPath("kustomize"); err == nil {
			kustomizeCmd.args = []string{path}
			return
		}
		kustomizeCmd.args = []string{"go", "run", "sigs.k8s.io/kustomize/kustomize/v5@" + kustomizeVersion}
	})
	return kustomizeCmd.args
}

// kustomizeBuild runs `kustomize build dir` and returns its objects by
// kind/name.
func kustomizeBuild(t *testing.T, dir string) map[string]manifest {
	t.Helper()
	args := append(slices.Clone(kustomize()), "build", dir)
	cmd := exec.Command(args[0], args[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	objects := map[string]manifest{}
	dec := yaml.NewDecoder(&stdout)
	for {
		// Into a plain map: decoding into manifest would make every nested
		// map a manifest too.
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kustomize build %s printed what does not parse: %v", dir, err)
		}
		if raw == nil {
			continue
		}
		m := manifest(raw)
		name, _ := m.get("metadata", "name").(string)
		api, _ := m["apiVersion"].(string)
		if m.kind() == "" || api == "" || name == "" {
			t.Errorf("kustomize build %s: an object without apiVersion, kind or metadata.name", dir)
			continue
		}
		key := m.kind() + "/" + name
		if _, dup := objects[key]; dup {
			t.Errorf("kustomize build %s: %s twice", dir, key)
		}
		objects[key] = m
	}
	return objects
}

// withMonitoring writes the overlay that deploy/kubernetes/kustomization.yaml
// shows, deploy/kubernetes with the component monitoring/, in a directory of
// the test's, and returns it. kustomize takes only relative paths to them.
func withMonitoring(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	overlay := "resources: [" + base + "]\ncomponents: [" + filepath.Join(base, "monitoring") + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// builtinAPIs are the API groups every Kubernetes cluster serves, with no
// custom resource definition installed.
var builtinAPIs = []string{"v1", "apps/v1", "policy/v1", "autoscaling/v2", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1"}

// TestKustomizeMonitoringIsOptIn renders deploy/kubernetes with kustomize,
// without and with the component monitoring/: the base holds only kinds
// that every cluster serves, so kubectl apply -k deploy/kubernetes works
// without the Prometheus Operator; the component adds the ServiceMonitor and
// changes nothing else.
func TestKustomizeMonitoringIsOptIn(t *testing.T) {
	t.Parallel()
	base := kustomizeBuild(t, "kubernetes")
	var kinds []string
	for key, m := range base {
		kinds = append(kinds, key)
		if api, _ := m["apiVersion"].(string); !slices.Contains(builtinAPIs, api) {
			t.Errorf("kubectl apply -k deploy/kubernetes sends %s of %s, which a cluster without its custom resource definition refuses: move it into a component", key, api)
		}
	}
	slices.Sort(kinds)
	if want := []string{"Deployment/idemd", "Service/idemd"}; !slices.Equal(kinds, want) {
		t.Errorf("deploy/kubernetes renders %v, want %v", kinds, want)
	}

	monitored := kustomizeBuild(t, withMonitoring(t))
	sm := monitored["ServiceMonitor/idemd"]
	if sm == nil || sm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Fatalf("deploy/kubernetes with the component monitoring/ has no ServiceMonitor idemd of monitoring.coreos.com/v1: %v", sm)
	}
	if len(monitored) != len(base)+1 {
		t.Errorf("the component monitoring/ adds %d objects, want the ServiceMonitor alone", len(monitored)-len(base))
	}
	for key, m := range base {
		a, _ := yaml.Marshal(map[string]any(m))
		b, _ := yaml.Marshal(map[string]any(monitored[key]))
		if !bytes.Equal(a, b) {
			t.Errorf("the component monitoring/ changes %s:\nwithout it\n%s\nwith it\n%s", key, a, b)
		}
	}
}
