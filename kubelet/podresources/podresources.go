// Package podresources asks the kubelet of this node which pod was given
// which GPU, from its pod-resources API (the gRPC service on a unix socket
// that dcgm-exporter reads), and joins each pod to its UID from the pod log
// directory. What it reads is kubelet.Allocations.
package podresources

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/kubelet"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultPodLogs is the kubelet's pod log directory, which holds one
// directory per pod named namespace_name_uid (the kubelet's
// BuildPodLogsDirectory).
const DefaultPodLogs = "/var/log/pods"

// The limits leave the kubelet a wide margin. It answers in well under a
// second, and even a node of hundreds of pods lists a few hundred KiB. A
// socket that answers more, or slower, is not read further.
const (
	DefaultTimeout = 5 * time.Second
	maxMessage     = 16 << 20
	maxLogDirs     = 100_000
	gpuResourcePre = "nvidia.com/gpu"  // nvidia.com/gpu, and renamed ones such as nvidia.com/gpu.shared
	migResourcePre = "nvidia.com/mig-" // MIG devices under the device plugin's mixed strategy
	replicaSep     = "::"              // a time-sliced replica's id is <device id>::<replica>
	sharedSuffix   = ".shared"         // the device plugin's renamed shared resources
	// AMD's device plugin hands out amd.com/gpu by PCI slot (0000:03:00.0),
	// Intel's gpu.intel.com/i915 and /xe by card node and share (card1-0),
	// several pods a card where its shared-dev-num allows.
	amdResource   = "amd.com/gpu"
	intelResource = "gpu.intel.com/"
)

// Options say where to ask.
type Options struct {
	Socket  string        // DefaultSocket when ""
	PodLogs string        // DefaultPodLogs when ""
	Timeout time.Duration // DefaultTimeout when 0
	// CDISpecDirs are where DRA drivers write their claims' CDI specs
	// (cdi.DefaultSpecDirs when nil).
	CDISpecDirs []string
}

// Read asks the kubelet which pods were given a GPU. When a pod's UID cannot
// be told, the allocations come back incomplete with an error naming the pod,
// so what could not be joined is said, not dropped. So is a pod whose DRA
// devices are not resolved (kubelet.ErrNotUnderstood). When the kubelet
// cannot be asked, they are nil.
func Read(ctx context.Context, o Options) (*kubelet.Allocations, error) {
	pods, listed, err := gpuPods(ctx, o)
	if !listed {
		return nil, err
	}
	uids, lerr := joinUIDs(pods, cmp.Or(o.PodLogs, DefaultPodLogs))
	a := &kubelet.Allocations{Pods: pods, Complete: lerr == nil, Running: uids}
	if why := a.NotUnderstood(); len(why) > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %s", kubelet.ErrNotUnderstood, strings.Join(why, "; ")))
	}
	return a, errors.Join(err, lerr)
}

// gpuPods lists the pods that were given a GPU, and whether the kubelet
// answered. Once it did, the error is the CDI specs that could not be read.
func gpuPods(ctx context.Context, o Options) (pods []kubelet.Pod, listed bool, err error) {
	socket := cmp.Or(o.Socket, DefaultSocket)
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(o.Timeout, DefaultTimeout))
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, false, fmt.Errorf("kubelet pod-resources %s: %w", socket, err)
	}
	defer conn.Close()
	res, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return nil, false, fmt.Errorf("kubelet pod-resources %s: %w", socket, err)
	}
	var resolve claimResolver
	for _, pr := range res.GetPodResources() {
		p := kubelet.Pod{Namespace: pr.GetNamespace(), Name: pr.GetName()}
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				devicePluginGPUs(&p, d)
			}
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					resolve.add(&p, o.CDISpecDirs, dr, cr)
				}
			}
		}
		if len(p.GPUs) == 0 && len(p.Claims) == 0 {
			continue
		}
		slices.Sort(p.GPUs)
		p.GPUs = slices.Compact(p.GPUs)
		pods = append(pods, p)
	}
	return pods, true, resolve.err
}

// devicePluginGPUs adds the GPUs of one device-plugin resource. It reads any
// nvidia.com/gpu* resource and the MIG ones, each id without a time-sliced
// replica's suffix, AMD's by PCI slot and Intel's by card name. Several
// pods may then share a GPU.
func devicePluginGPUs(p *kubelet.Pod, d *podresourcesv1.ContainerDevices) {
	r := d.GetResourceName()
	if r == amdResource || strings.HasPrefix(r, intelResource) {
		for _, id := range d.GetDeviceIds() {
			// A share past the first says the card is shared.
			if card, share, ok := strings.Cut(id, "-"); ok && strings.HasPrefix(card, "card") {
				id, p.Shared = card, p.Shared || share != "0"
			}
			p.GPUs = append(p.GPUs, id)
		}
		return
	}
	if !strings.HasPrefix(r, gpuResourcePre) && !strings.HasPrefix(r, migResourcePre) {
		return
	}
	if strings.HasSuffix(r, sharedSuffix) {
		p.Shared = true
	}
	for _, id := range d.GetDeviceIds() {
		if dev, _, replica := strings.Cut(id, replicaSep); replica {
			id, p.Shared = dev, true
		}
		p.GPUs = append(p.GPUs, id)
	}
}

// joinUIDs fills each pod's UID from the pod log directory's names,
// namespace_name_uid (neither a namespace nor a pod name may hold "_"). It
// returns the UIDs of every pod the directory names, which are the pods
// this node runs, GPU or not.
func joinUIDs(pods []kubelet.Pod, dir string) (map[string]bool, error) {
	f, err := os.Open(dir)
	if err != nil && len(pods) == 0 {
		return nil, nil // no GPU pod to join, and no pod is known to run here
	}
	if err != nil {
		return nil, fmt.Errorf("pod UIDs: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(maxLogDirs)
	if err != nil && len(names) == 0 && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("pod UIDs: %s: %w", dir, err)
	}
	running := map[string]bool{}
	uids := map[string][]string{} // namespace_name -> UIDs
	for _, n := range names {
		i := strings.LastIndexByte(n, '_')
		if i <= 0 || strings.Count(n, "_") != 2 {
			continue
		}
		uids[n[:i]] = append(uids[n[:i]], n[i+1:])
		running[n[i+1:]] = true
	}
	var unjoined []string
	for i := range pods {
		p := &pods[i]
		switch u := uids[p.Namespace+"_"+p.Name]; len(u) {
		case 1:
			p.UID = u[0]
		case 0:
			unjoined = append(unjoined, p.Namespace+"/"+p.Name+" (no directory in "+dir+")")
		default:
			unjoined = append(unjoined, p.Namespace+"/"+p.Name+" (directories of "+fmt.Sprint(len(u))+" pods of that name in "+dir+")")
		}
	}
	if len(unjoined) > 0 {
		return running, errors.New("pod UIDs not known, so their processes are not joined to them: " + strings.Join(unjoined, ", "))
	}
	return running, nil
}
