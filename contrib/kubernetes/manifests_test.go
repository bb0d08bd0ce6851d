// Package kubernetes holds gpusnap's Kubernetes manifests; its test decodes
// every one strictly into the Kubernetes API's own types.
package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// scheme knows the API types the manifests may hold.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// decodeStrict decodes one YAML document into its API type with the API
// machinery's strict decoder, as the API server's strict field validation
// does: an unknown field (also one that differs from a known one in case
// only: encoding/json, and so sigs.k8s.io/yaml, would take hostPid for
// hostPID), a duplicated field, a value of the wrong type or an unknown kind
// is an error.
func decodeStrict(doc []byte) (runtime.Object, error) {
	obj, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer().Decode(doc, nil, nil)
	return obj, err
}

// documents splits a YAML stream at its "---" lines.
func documents(data []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v (%d)", err, len(files))
	}
	var ds *appsv1.DaemonSet
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documents(data) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			if d, ok := obj.(*appsv1.DaemonSet); ok && d.Name == "gpusnap" {
				ds = d
			}
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet gpusnap in the manifests")
	}
	checkDaemonSet(t, ds)
}

// checkDaemonSet holds the DaemonSet to what docs and README promise.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("hostPID is off: NVML's PIDs are the host's")
	}
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "gpusnap" || spec.Containers[1].Name != "nri" {
		t.Fatalf("containers %d, want gpusnap (watch) and nri", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) < 2 || c.Args[0] != "watch" || c.Args[1] != "--listen=:9402" {
		t.Errorf("args %q, want watch --listen=:9402 ...", c.Args)
	}
	want := map[string]bool{"/proc": true, "/sys/kernel/btf": true, "/sys/fs/cgroup": true, "/dev": true,
		"/var/lib/kubelet/pod-resources": true, "/var/log/pods": true, "/etc/cdi": true, "/var/run/cdi": true, "/var/lib/gpusnap": false}
	checkContainer(t, spec, c, []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "CHECKPOINT_RESTORE", "NET_ADMIN", "SYSLOG"}, want)
	n := spec.Containers[1]
	if !slices.Contains(n.Args, "--socket=/var/run/nri/nri.sock") || n.Args[0] != "nri" || !slices.Contains(n.Args, "--require-nvml") {
		t.Errorf("nri args %q, want nri --socket=/var/run/nri/nri.sock --require-nvml ...", n.Args)
	}
	want["/var/run/nri"] = false
	checkContainer(t, spec, n, []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE", "CHECKPOINT_RESTORE", "SYSLOG"}, want)
	ann := ds.Spec.Template.Annotations
	port, _ := strconv.Atoi(ann["prometheus.io/port"])
	if ann["prometheus.io/scrape"] != "true" || len(c.Ports) != 1 || int(c.Ports[0].ContainerPort) != port {
		t.Errorf("scrape annotations %v do not name the container's port %v", ann, c.Ports)
	}
}

// checkContainer holds a container to least privilege: unprivileged, every
// capability dropped but allowed, limits set, and every host path of want
// mounted, read-only as want says.
func checkContainer(t *testing.T, spec corev1.PodSpec, c corev1.Container, allowed []corev1.Capability, want map[string]bool) {
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || sc.Privileged == nil || *sc.Privileged ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Fatalf("security context %+v: want unprivileged, no privilege escalation, capabilities listed", sc)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities dropped %v, want ALL", sc.Capabilities.Drop)
	}
	for _, cp := range sc.Capabilities.Add {
		if !slices.Contains(allowed, cp) {
			t.Errorf("%s: capability %s added: more than it needs", c.Name, cp)
		}
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("resource limits %v: want cpu and memory", c.Resources.Limits)
	}
	// Every host path is mounted read-only, but the store.
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		path, ok := hostPaths[m.Name]
		if !ok {
			t.Errorf("mount %s is no host path", m.Name)
			continue
		}
		readOnly, expected := want[path]
		switch {
		case !expected:
			t.Errorf("%s: host path %s mounted: not one it needs", c.Name, path)
		case m.ReadOnly != readOnly:
			t.Errorf("%s: host path %s: read-only %v, want %v", c.Name, path, m.ReadOnly, readOnly)
		}
		mounted[path] = true
	}
	for path := range want {
		if !mounted[path] {
			t.Errorf("%s: host path %s not mounted", c.Name, path)
		}
	}
}

// TestDecodeStrictRefuses proves the decoding is strict: a misspelt field,
// a duplicated one and a wrong type are errors, not silently dropped.
func TestDecodeStrictRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostPid: true\n",
		"duplicate field": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n",
		"wrong type":      "apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostPID: \"yes\"\n",
		"unknown kind":    "apiVersion: apps/v1\nkind: DaemonSett\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}
