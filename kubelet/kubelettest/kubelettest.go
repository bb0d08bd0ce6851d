// Package kubelettest serves the kubelet's pod-resources v1 gRPC service on
// a unix socket, from pods a test gives, as the kubelet serves it on a node.
// It uses the real service definition and the real transport.
package kubelettest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Lister answers List with Pods, or, with Hang, not until the call is given up.
type Lister struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Pods []*podresourcesv1.PodResources
	Hang bool
}

// List is the service's List call.
func (l *Lister) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	if l.Hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: l.Pods}, nil
}

// Serve serves l on a new unix socket until the test ends, and returns its path.
func Serve(t testing.TB, l *Lister) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, l)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return socket
}

// Pod is a pod of the kubelet's answer.
func Pod(namespace, name string, containers ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: containers}
}

// Container is a container of a pod and the devices it was given.
func Container(name string, devices ...*podresourcesv1.ContainerDevices) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: devices}
}

// Devices are the device ids of one resource (nvidia.com/gpu ...).
func Devices(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

// DRAContainer is a container given devices by DRA resource claims.
func DRAContainer(name string, claims ...*podresourcesv1.DynamicResource) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, DynamicResources: claims}
}

// Claim is a resource claim of a container and the devices allocated to it.
func Claim(namespace, name string, devices ...*podresourcesv1.ClaimResource) *podresourcesv1.DynamicResource {
	return &podresourcesv1.DynamicResource{ClaimNamespace: namespace, ClaimName: name, ClaimResources: devices}
}

// ClaimDevice is one device of a claim, with its driver, pool and name, its
// share id ("" for none) and the CDI devices the driver prepared for it.
func ClaimDevice(driver, pool, device, shareID string, cdiDevices ...string) *podresourcesv1.ClaimResource {
	r := &podresourcesv1.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: device}
	if shareID != "" {
		r.ShareId = &shareID
	}
	for _, n := range cdiDevices {
		r.CdiDevices = append(r.CdiDevices, &podresourcesv1.CDIDevice{Name: n})
	}
	return r
}

// NVIDIAClaimSpec writes into dir the transient CDI spec that NVIDIA's DRA
// driver writes for a prepared claim, and returns the device's qualified
// CDI name, as the kubelet lists it. The spec is
// k8s.gpu.nvidia.com-claim_<claim uid>.yaml, of vendor k8s.gpu.nvidia.com
// and class claim, with a device <claim uid>-<device name> whose edits add
// the GPU's node /dev/nvidia<minor> and a MIG device's capability nodes.
func NVIDIAClaimSpec(t testing.TB, dir, claimUID, device string, minor int) string {
	t.Helper()
	caps := ""
	if strings.Contains(device, "-mig-") {
		caps = "\n    - path: /dev/nvidia-caps/nvidia-cap120\n    - path: /dev/nvidia-caps/nvidia-cap121"
	}
	spec := fmt.Sprintf(`---
cdiVersion: 0.5.0
kind: k8s.gpu.nvidia.com/claim
devices:
- name: %[1]s-%[2]s
  containerEdits:
    env:
    - NVIDIA_VISIBLE_DEVICES=void
    deviceNodes:
    - path: /dev/nvidia%[3]d
      hostPath: /dev/nvidia%[3]d%[4]s
    - path: /dev/nvidiactl
    - path: /dev/nvidia-uvm
`, claimUID, device, minor, caps)
	if err := os.WriteFile(filepath.Join(dir, "k8s.gpu.nvidia.com-claim_"+claimUID+".yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return "k8s.gpu.nvidia.com/claim=" + claimUID + "-" + device
}
