package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/kubelet/podresources"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// Allocation says where the GPUs a tenant was given come from, and the
// first that answers wins. Given (the operator's --gpus, or the GPUs a
// runtime handed a container), else the kubelet's for a pod it lists, else the
// environment a Slurm prolog is given (SLURM_JOB_GPUS, then
// CUDA_VISIBLE_DEVICES). None answering leaves the baseline without one.
type Allocation struct {
	Given *snapshot.GPUSet
	// Pods is where to ask the kubelet, nil on no Kubernetes node.
	Pods *podresources.Options
	// Env reads the environment. It is nil when the environment says nothing
	// of the tenant (a plugin's own environment is not its pods').
	Env func(string) string
}

// fromEnv is the allocation before the kubelet is asked. It is Given, else
// the environment's, or nil when neither says.
func (a Allocation) fromEnv() (*snapshot.GPUSet, error) {
	if a.Given != nil || a.Env == nil {
		return a.Given, nil
	}
	set, _, err := snapshot.AllocationFromEnv(a.Env)
	if err != nil {
		return nil, fmt.Errorf("allocation from the environment: %w (give --gpus)", err)
	}
	return set, nil
}

// fromKubelet puts the kubelet's allocation of a pod tenant on snap, over
// the environment's. Given is never overridden, and with it no kubelet is asked.
// A kubelet that cannot be asked, lists no GPU of the pod, or gives it GPUs
// that are not understood (a DRA device not resolved), is a warning.
func (h *Host) fromKubelet(ctx context.Context, tenant string, a Allocation, snap *snapshot.Snapshot) error {
	if a.Given != nil || a.Pods == nil {
		return nil
	}
	pods, err := podresources.Read(ctx, *a.Pods)
	if err != nil {
		h.warnErr(err)
	}
	if pods == nil {
		return nil
	}
	set, ok, err := pods.GPUsOf(tenant, snap.NVML.Devices)
	switch {
	case errors.Is(err, kubelet.ErrNotUnderstood):
		// It is neither no GPU nor every GPU, so the diff judges no use against it.
		h.warnErr(fmt.Errorf("%w: the baseline records no allocation", err))
	case err != nil:
		return err
	case ok:
		snap.Allocation = set
	case snap.Allocation == nil:
		h.Warn(fmt.Sprintf("the kubelet lists no GPU of pod %s and does not run it (yet): the baseline records no allocation", safetext.Escape(tenant)))
	}
	return nil
}

// Baseline captures the host and stores it as tenant's baseline with the
// GPUs a names, and returns it with the head of the store's log after it.
// An allocation the environment cannot give is an error before capturing.
func (h *Host) Baseline(ctx context.Context, tenant string, a Allocation) (*snapshot.Snapshot, tlog.TreeHead, error) {
	snap, err := h.CaptureBaseline(ctx, tenant, a)
	if err != nil {
		return nil, tlog.TreeHead{}, err
	}
	_, head, err := h.Put(snap)
	return snap, head, err
}

// CaptureBaseline captures the host as tenant's baseline with the GPUs a
// names, not stored yet. A gate judges this capture before Put stores it,
// so that what it judged and what a later diff compares against are one.
func (h *Host) CaptureBaseline(ctx context.Context, tenant string, a Allocation) (*snapshot.Snapshot, error) {
	given, err := a.fromEnv()
	if err != nil {
		return nil, err
	}
	snap, err := h.Capture(ctx, snapshot.LabelBaseline, tenant)
	if err != nil {
		return nil, err
	}
	snap.Allocation = given
	if why := snap.NVML.Unavailable; why != "" {
		if sign := h.DriverSign(snap.Host.ProcRoot); sign != "" {
			h.Warn(fmt.Sprintf("NVML was not read (%s) though %s shows an NVIDIA driver: GPU memory will not be compared against this baseline (--require-nvml makes this an error)",
				safetext.Escape(why), safetext.Escape(sign)))
		}
	}
	if err := h.fromKubelet(ctx, tenant, a, snap); err != nil {
		return nil, err
	}
	return snap, nil
}

// Put stores snap and returns the processes' JSON it stored and the head of
// the store's log after its leaf. The store is opened after the capture, so
// its lock is held for the write alone and not for the /proc walk.
func (h *Host) Put(snap *snapshot.Snapshot) (procs [][]byte, head tlog.TreeHead, err error) {
	err = h.use(true, func(st *store.Store) error {
		if procs, err = st.EncodeProcesses(snap); err != nil {
			return err
		}
		if err = st.PutEncoded(snap, procs); err != nil {
			return err
		}
		head, err = st.Head()
		return err
	})
	if err != nil {
		return nil, head, err
	}
	return procs, head, nil
}
