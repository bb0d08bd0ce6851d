package main

import (
	"time"

	"github.com/urfave/cli/v2"
)

// nriCommand is the same in both builds. The common gpusnap, which leaves
// NRI out, hands the command to gpusnap-full (full.go).
func nriCommand() *cli.Command {
	return &cli.Command{
		Name:  "nri",
		Usage: "NRI plugin for containerd and CRI-O: baseline each pod, refuse a GPU container whose GPUs are not clean, diff each pod at its end",
		UsageText: "gpusnap nri [--socket PATH] [--evidence-dir DIR] [--allow FILE] [--sign-key KEY] [--textfile FILE] [--reap [--reap-grace DUR]]\n\n" +
			"Runs until SIGTERM, connected to the runtime's NRI socket, the pod UID as the tenant:\n" +
			"RunPodSandbox stores the pod's baseline (its GPUs from the kubelet's pod-resources API when it lists\n" +
			"the pod, and then the pod is refused unless they are clean in that capture); CreateContainer of a container given GPUs (its devices, NVIDIA_VISIBLE_DEVICES, its CDI devices,\n" +
			"a DRA claim's among them, through the CDI specs of --cdi-spec-dir) checks them and refuses the container\n" +
			"with the check's reason unless clean (the pod's first such container, where the kubelet gave no GPUs,\n" +
			"stores the baseline that records them from the capture its check judged); StopPodSandbox (or\n" +
			"RemovePodSandbox, when the stop was missed) diffs the pod, writing its report and bundle to --evidence-dir\n" +
			"and one syslog line. With --reap it first ends what the pod left, as gpusnap reap --tenant POD_UID\n" +
			"--job-ended --yes does (evidence first, through pidfds, the pod judged again), and says what it ended.\n" +
			"docs/kubernetes.md tells the whole story.\n\n" +
			"Examples:\n  gpusnap nri --require-nvml --allow /etc/gpusnap/allow.list   # in the DaemonSet, beside watch\n" +
			"  gpusnap nri --socket /run/nri/nri.sock --sign-key /etc/gpusnap/bundle.key",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "socket", Value: "/var/run/nri/nri.sock", Usage: "the runtime's NRI `SOCKET`"},
			&cli.StringFlag{Name: "evidence-dir", Value: "/var/lib/gpusnap/evidence", Usage: "where each pod's report and bundle go (`DIR`, made 0700)"},
			allowFlag("expected workloads, downgraded to info"),
			&cli.StringFlag{Name: "sign-key", Usage: "sign each bundle with the ed25519 private `KEY`"},
			&cli.StringFlag{Name: "syslog-socket", Usage: "send each verdict line to the syslog `SOCKET` (default /dev/log where it exists)"},
			textfileFlag(),
			&cli.BoolFlag{Name: "reap", Usage: "at a pod's end, end what it left (as gpusnap reap --job-ended --yes) before judging it: the plugin then needs the host's /proc, KILL and a writable cgroup"},
			&cli.DurationFlag{Name: "reap-grace", Value: 5 * time.Second, Usage: "with --reap: how long a leftover has after SIGTERM before SIGKILL (`DUR`)"},
		}, podFlags()...),
		Action: nriAction(),
	}
}
