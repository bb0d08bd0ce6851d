package kubernetes

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// nodeReadinessRule mirrors the Node Readiness Controller's NodeReadinessRule
// (readiness.node.x-k8s.io/v1alpha1, api/v1alpha1: NodeReadinessRuleSpec,
// ConditionRequirement, its taint and enforcement mode), field for field
// with its JSON names, so a strict decode rejects what the API would not take.
type nodeReadinessRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeSelector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"nodeSelector"`
		Conditions []struct {
			Type           string `json:"type"`
			RequiredStatus string `json:"requiredStatus"`
		} `json:"conditions"`
		Taint struct {
			Key    string `json:"key"`
			Value  string `json:"value"`
			Effect string `json:"effect"`
		} `json:"taint"`
		EnforcementMode string `json:"enforcementMode"`
		DryRun          bool   `json:"dryRun"`
	} `json:"spec"`
}

// The node stays out of service until check passes: the rule taints it
// while NPD's condition is anything but False (Unknown too), on the nodes
// the DaemonSet runs on, and the DaemonSet tolerates the taint, or no check
// would ever run to lift it.
func TestReadinessRuleTaintsUntilClean(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("readiness", "gpusnap-readiness-rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r nodeReadinessRule
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatalf("the rule does not decode strictly: %v", err)
	}
	npd, _, _ := loadNPDConfig(t)
	if r.APIVersion != "readiness.node.x-k8s.io/v1alpha1" || r.Kind != "NodeReadinessRule" || r.Spec.DryRun {
		t.Errorf("rule %s %s (dry run %v)", r.APIVersion, r.Kind, r.Spec.DryRun)
	}
	c := r.Spec.Conditions
	if len(c) != 1 || len(npd.Conditions) != 1 || c[0].Type != npd.Conditions[0].Type || c[0].RequiredStatus != "False" {
		t.Errorf("conditions %+v: want NPD's %+v required False", c, npd.Conditions)
	}
	if r.Spec.Taint.Effect != string(corev1.TaintEffectNoSchedule) || r.Spec.EnforcementMode != "continuous" {
		t.Errorf("taint %+v, enforcement %q: want NoSchedule, continuous", r.Spec.Taint, r.Spec.EnforcementMode)
	}
	spec := daemonSet(t).Spec.Template.Spec
	if !reflect.DeepEqual(r.Spec.NodeSelector.MatchLabels, spec.NodeSelector) {
		t.Errorf("the rule selects %v, the DaemonSet runs on %v", r.Spec.NodeSelector.MatchLabels, spec.NodeSelector)
	}
	taint := corev1.Taint{Key: r.Spec.Taint.Key, Value: r.Spec.Taint.Value, Effect: corev1.TaintEffect(r.Spec.Taint.Effect)}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
		t.Errorf("the DaemonSet does not tolerate the taint %v: no check would run to lift it", taint)
	}
	if doc := string(data); !strings.Contains(doc, "--register-with-taints="+taint.Key+"=:NoSchedule") {
		t.Error("the rule does not say how a node registers with the taint on")
	}
}

// The namespace enforces the Pod Security level the DaemonSet needs.
func TestNamespacePodSecurity(t *testing.T) {
	data, err := os.ReadFile("gpusnap-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range documents(data) {
		obj, err := decodeStrict(doc)
		ns, ok := obj.(*corev1.Namespace)
		if err != nil || !ok {
			continue
		}
		for _, mode := range []string{"enforce", "audit", "warn"} {
			if got := ns.Labels["pod-security.kubernetes.io/"+mode]; got != "privileged" {
				t.Errorf("namespace %s: pod-security %s %q, want privileged (hostPID, host paths, capabilities)", ns.Name, mode, got)
			}
		}
		return
	}
	t.Fatal("no Namespace in gpusnap-daemonset.yaml")
}

// TestEveryImageNamesTheRelease: every image reference under contrib/ is the
// release the repository is at (VERSION), never a moving tag.
func TestEveryImageNamesTheRelease(t *testing.T) {
	release, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/gpusnap/gpusnap:" + strings.TrimSpace(string(release))
	for _, c := range daemonSet(t).Spec.Template.Spec.Containers {
		if c.Image != want {
			t.Errorf("container %s runs %s, want %s", c.Name, c.Image, want)
		}
	}
	ref := regexp.MustCompile(`ghcr\.io/gpusnap/gpusnap(:[^\s"']*)?`)
	n := 0
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range ref.FindAllString(string(data), -1) {
			n++
			if m != want {
				t.Errorf("%s: image %s, want %s", path, m, want)
			}
		}
		return nil
	})
	if err != nil || n < 2 {
		t.Errorf("walking contrib/: %v, %d image references", err, n)
	}
}
