package main

import (
	"context"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/kubelet/cdi"
	"github.com/gpusnap/gpusnap/kubelet/podresources"
)

// podFlags say where the kubelet tells which pod was given which GPU (docs/kubernetes.md).
func podFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "pod-resources", Value: podresources.DefaultSocket, EnvVars: []string{"GPUSNAP_POD_RESOURCES"},
			Usage: "the kubelet's pod-resources `SOCKET`: which pod was given which GPU (not asked when the default is absent)"},
		&cli.StringFlag{Name: "pod-logs", Value: podresources.DefaultPodLogs, Usage: "the kubelet's pod log `DIR`, whose namespace_name_uid directories give each pod's UID"},
		&cli.StringSliceFlag{Name: "cdi-spec-dir", Value: cli.NewStringSlice(cdi.DefaultSpecDirs...), EnvVars: []string{"GPUSNAP_CDI_SPEC_DIRS"},
			Usage: "a CDI spec `DIR` (repeatable): where DRA drivers write their claims' specs, whose device nodes name the GPUs a claim gives"},
	}
}

// podOptions are the pod flags' answer, where to ask the kubelet and where
// the CDI specs of its claims lie.
func podOptions(c *cli.Context) podresources.Options {
	return podresources.Options{Socket: c.String("pod-resources"), PodLogs: c.String("pod-logs"), CDISpecDirs: c.StringSlice("cdi-spec-dir")}
}

// parsePodFlags is where to ask the kubelet, nil when this is no Kubernetes
// node (the default socket is absent and no other was given).
func parsePodFlags(c *cli.Context) *podresources.Options {
	socket := c.String("pod-resources")
	if _, err := os.Stat(socket); err != nil && !c.IsSet("pod-resources") {
		return nil
	}
	o := podOptions(c)
	return &o
}

// podAllocations asks the kubelet which pod was given which GPU. It is nil
// when not asked or when the kubelet cannot be asked, which is then a line
// on stderr.
func podAllocations(ctx context.Context, g globals, o *podresources.Options) *kubelet.Allocations {
	if o == nil {
		return nil
	}
	alloc, err := podresources.Read(ctx, *o)
	if err != nil {
		warn(g, err)
	}
	return alloc
}
