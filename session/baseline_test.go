package session

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
	"github.com/gpusnap/gpusnap/kubelet/podresources"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

const (
	podUID   = "0f6b2c1d-5e4a-4b3c-9d8e-7f6a5b4c3d2e" // the tenant: a pod the kubelet may list
	otherUID = "9a8b7c6d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
	gpu0     = "GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c" // the scenario's one GPU
)

// kubeletOf serves the kubelet's pod-resources API listing pods (each
// given GPU 0) and a pod log directory naming them, and says where.
func kubeletOf(t *testing.T, pods map[string]string) *podresources.Options {
	t.Helper()
	logs := t.TempDir()
	var listed []*podresourcesv1.PodResources
	for name, uid := range pods {
		if err := os.Mkdir(filepath.Join(logs, "ml_"+name+"_"+uid), 0o755); err != nil {
			t.Fatal(err)
		}
		listed = append(listed, kubelettest.Pod("ml", name, kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", gpu0))))
	}
	return &podresources.Options{Socket: kubelettest.Serve(t, &kubelettest.Lister{Pods: listed}), PodLogs: logs}
}

func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// TestAllocationPrecedence: the GPUs given win over the kubelet's, the
// kubelet's over the environment's, SLURM_JOB_GPUS over
// CUDA_VISIBLE_DEVICES; what answers is stored with the baseline, and a
// kubelet that cannot tell is a warning, never an error.
func TestAllocationPrecedence(t *testing.T) {
	three, err := snapshot.ParseGPUList("3")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := &podresources.Options{Socket: filepath.Join(t.TempDir(), "absent.sock"), PodLogs: t.TempDir()}
	slurm := map[string]string{"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "2"}
	cases := []struct {
		name  string
		alloc func(t *testing.T) Allocation
		want  string // the stored allocation, as JSON
		warn  string // a warning that must be said; "" for none
	}{
		{"given over all", func(t *testing.T) Allocation {
			// An unreachable kubelet asked would be a warning.
			return Allocation{Given: &three, Pods: unreachable, Env: envOf(slurm)}
		}, `{"minors":[3]}`, ""},
		{"the kubelet over the environment", func(t *testing.T) Allocation {
			return Allocation{Pods: kubeletOf(t, map[string]string{"train-0": podUID}), Env: envOf(slurm)}
		}, `{"uuids":["` + gpu0 + `"]}`, ""},
		{"the environment where the kubelet lists the pod not", func(t *testing.T) Allocation {
			return Allocation{Pods: kubeletOf(t, map[string]string{"other-0": otherUID}), Env: envOf(slurm)}
		}, `{"minors":[1]}`, ""},
		{"CUDA_VISIBLE_DEVICES without SLURM_JOB_GPUS", func(t *testing.T) Allocation {
			return Allocation{Env: envOf(map[string]string{"CUDA_VISIBLE_DEVICES": "2"})}
		}, `{"minors":[2]}`, ""},
		{"a Slurm job given no GPU", func(t *testing.T) Allocation {
			return Allocation{Env: envOf(map[string]string{"SLURM_JOB_ID": "4242"})}
		}, `{}`, ""},
		{"an unreachable kubelet: the environment's, and a warning", func(t *testing.T) Allocation {
			return Allocation{Pods: unreachable, Env: envOf(slurm)}
		}, `{"minors":[1]}`, "kubelet pod-resources " + unreachable.Socket},
		{"nothing known of the pod", func(t *testing.T) Allocation {
			return Allocation{Pods: kubeletOf(t, map[string]string{"other-0": otherUID}), Env: envOf(nil)}
		}, `null`, "the kubelet lists no GPU of pod " + podUID},
		{"no source", func(t *testing.T) Allocation { return Allocation{} }, `null`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), "cuda-ghost-keeps-context")
			snap, head, err := f.host.Baseline(context.Background(), podUID, c.alloc(t))
			if err != nil {
				t.Fatal(err)
			}
			var stored *snapshot.Snapshot
			f.read(t, func(st *store.Store) error {
				stored, err = st.LatestBaseline(podUID)
				return err
			})
			got, _ := json.Marshal(stored.Allocation)
			if string(got) != c.want || stored.ID != snap.ID || head.Size == 0 {
				t.Errorf("stored allocation %s (baseline %s, log size %d), want %s", got, stored.ID, head.Size, c.want)
			}
			if c.warn == "" {
				f.noWarnings(t)
			} else if len(f.warnings) != 1 || !strings.Contains(f.warnings[0], c.warn) {
				t.Errorf("warnings %q, want one saying %q", f.warnings, c.warn)
			}
		})
	}
}

// TestBaselineBadEnvironmentCapturesNothing: a GPU list the environment
// cannot give is an error before the capture, and no store is created.
func TestBaselineBadEnvironmentCapturesNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	f := newFixture(t, db, "cuda-ghost-keeps-context")
	_, _, err := f.host.Baseline(context.Background(), "4242", Allocation{Env: envOf(map[string]string{"SLURM_JOB_GPUS": "zero"})})
	wantIn(t, "baseline", err, "SLURM_JOB_GPUS", "give --gpus")
	if _, serr := os.Stat(db); f.captures != 0 || !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("%d captures, store %v: want none, and no store", f.captures, serr)
	}
}
