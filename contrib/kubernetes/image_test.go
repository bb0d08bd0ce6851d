package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// daemonSet is the gpusnap DaemonSet of the manifest.
func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	data, err := os.ReadFile("gpusnap-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range documents(data) {
		if obj, err := decodeStrict(doc); err == nil {
			if ds, ok := obj.(*appsv1.DaemonSet); ok {
				return ds
			}
		}
	}
	t.Fatal("no DaemonSet in gpusnap-daemonset.yaml")
	return nil
}

// TestImageCatchesGhost builds the image with make image, loads it with
// podman, and runs it as the DaemonSet runs it (the host's PIDs, its /proc
// and /dev where the DaemonSet mounts them, its environment): a baseline,
// then a ghost on a fake GPU, then a diff that must find it.
func TestImageCatchesGhost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("image test: needs root (buildah, podman --privileged, loop devices)")
	}
	livetest.Require(t, "make", "buildah", "podman", "/usr/sbin/runc", "losetup", "gcc")
	dist, build := t.TempDir(), t.TempDir()
	if out, err := exec.Command("make", "-C", "../..", "image", "DIST="+dist, "BUILD="+build).CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	version, err := exec.Command("make", "-s", "-C", "../..", "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	oci := filepath.Join(dist, fmt.Sprintf("gpusnap-%s-%s.oci.tar", strings.TrimSpace(string(version)), strings.TrimSpace(string(arch))))
	out, err := exec.Command("podman", "load", "-q", "-i", oci).CombinedOutput()
	m := regexp.MustCompile(`Loaded image: (\S+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("podman load %s: %v\n%s", oci, err, out)
	}
	image := string(m[1])
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", image).Run() })
	if tag := strings.ReplaceAll(strings.TrimSpace(string(version)), "~", "-"); !strings.HasSuffix(image, "gpusnap/gpusnap:"+tag) {
		t.Errorf("the image is named %s, want its version %s as the tag", image, tag)
	}

	base := podmanArgs(t, daemonSet(t))
	store := t.TempDir()
	gpusnap := func(args ...string) (int, string) {
		cmd := exec.Command("podman", append(append(base, "-v", store+":/var/lib/gpusnap", image), args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("podman run: %v", err)
		}
		return cmd.ProcessState.ExitCode(), string(out) + stderr.String()
	}
	if code, report := gpusnap("baseline", "--no-nvml", "--tenant", "image-test"); code != 0 {
		t.Fatalf("baseline in the image: exit %d\n%s", code, report)
	}
	sc := livetest.StartGhost(t, livetest.NewLoop(t), livetest.Options{})
	// Other tests' ghosts on this host are findings too: this one's is looked for by PID.
	code, report := gpusnap("diff", "--no-nvml", "--tenant", "image-test")
	if _, ok := livetest.ReportFinding(report, "leftover_device_mapping", sc.Ghost.PID); code != 1 || !ok {
		t.Fatalf("diff in the image: exit %d, want 1 with leftover_device_mapping of %d:\n%s", code, sc.Ghost.PID, report)
	}
	t.Logf("the image (%s) found the ghost %d: %s", image, sc.Ghost.PID, firstLine(report))
	// The nri container's gpusnap execs the image's gpusnap-full: only the
	// plugin dials the socket.
	code, report = gpusnap("nri", "--socket", "/tmp/no-nri.sock", "--evidence-dir", "/tmp/evidence")
	if code != 2 || !strings.Contains(report, "gpusnap: nri /tmp/no-nri.sock: failed to connect to NRI service") {
		t.Errorf("nri in the image: exit %d, want 2 from gpusnap-full's plugin\n%s", code, report)
	}
}

// podmanArgs runs the image as the DaemonSet runs its container: the host's
// PID namespace, the host paths it mounts read-only (/proc, /dev) where it
// mounts them, and its environment. podman needs runc here (crun refuses
// hybrid cgroups) and ulimits within the hard limits (no CAP_SYS_RESOURCE):
// 4096 is ample for gpusnap, and runc refused nproc=65536 on a host whose
// hard limit was 96365, so no more is asked.
func podmanArgs(t *testing.T, ds *appsv1.DaemonSet) []string {
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	var nofile, nproc syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrlimit(6 /* RLIMIT_NPROC */, &nproc); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--rm", "--runtime", "/usr/sbin/runc", "--privileged",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", min(nofile.Max, 4096), min(nofile.Max, 4096)),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", min(nproc.Max, 4096), min(nproc.Max, 4096))}
	if spec.HostPID {
		args = append(args, "--pid=host")
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range c.VolumeMounts {
		if p := hostPaths[m.Name]; p == "/proc" || p == "/dev" {
			args = append(args, "-v", p+":"+m.MountPath+":ro")
		}
	}
	for _, e := range c.Env {
		args = append(args, "-e", e.Name+"="+e.Value)
	}
	return args
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
