// Package kubelettest serves the kubelet's pod-resources v1 gRPC service on
// a unix socket, from pods a test gives, as the kubelet serves it on a node:
// the real service definition, the real transport.
package kubelettest

import (
	"context"
	"net"
	"path/filepath"
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
