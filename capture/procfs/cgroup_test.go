package procfs

import (
	"strings"
	"testing"
)

func TestParseCgroup(t *testing.T) {
	hex := func(s string) string { return strings.Repeat(s, 8) }
	for _, tc := range []struct {
		name, data string
		want       Attribution
	}{
		{"docker systemd", "0::/system.slice/docker-" + hex("3f2a9c1e") + ".scope\n",
			Attribution{ContainerID: hex("3f2a9c1e"), Runtime: "docker", SystemdUnit: "docker-" + hex("3f2a9c1e") + ".scope"}},
		{"docker cgroupfs v1", "12:pids:/docker/" + hex("ab12cd34") + "\n4:memory:/docker/" + hex("ab12cd34") + "\n",
			Attribution{ContainerID: hex("ab12cd34"), Runtime: "docker"}},
		{"containerd k8s burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_112233445566.slice/cri-containerd-" + hex("c0ffee00") + ".scope\n",
			Attribution{ContainerID: hex("c0ffee00"), Runtime: "containerd", PodUID: "1a2b3c4d-5e6f-7a8b-9c0d-112233445566", SystemdUnit: "cri-containerd-" + hex("c0ffee00") + ".scope"}},
		{"cri-o guaranteed", "0::/kubepods.slice/kubepods-pod9f8e7d6c_5b4a_3928_1706_f5e4d3c2b1a0.slice/crio-" + hex("0123abcd") + ".scope\n",
			Attribution{ContainerID: hex("0123abcd"), Runtime: "cri-o", PodUID: "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0", SystemdUnit: "crio-" + hex("0123abcd") + ".scope"}},
		{"cri-o conmon is not the container", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaa_bb.slice/crio-conmon-" + hex("0123abcd") + ".scope\n",
			Attribution{PodUID: "aa-bb", SystemdUnit: "crio-conmon-" + hex("0123abcd") + ".scope"}},
		{"kubelet cgroupfs", "4:memory:/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/" + hex("fedcba98") + "\n0::/\n",
			Attribution{ContainerID: hex("fedcba98"), PodUID: "11111111-2222-3333-4444-555555555555"}},
		{"kubelet cgroupfs guaranteed", "0::/kubepods/pod11111111-2222-3333-4444-555555555555/" + hex("fedcba98") + "\n",
			Attribution{ContainerID: hex("fedcba98"), PodUID: "11111111-2222-3333-4444-555555555555"}},
		{"podman", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + hex("99887766") + ".scope/container\n",
			Attribution{ContainerID: hex("99887766"), Runtime: "podman", SystemdUnit: "libpod-" + hex("99887766") + ".scope"}},
		{"slurm v1", "12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n11:devices:/slurm/uid_1000/job_4242/step_0\n",
			Attribution{SlurmJobID: "4242"}},
		{"slurm v1 multiple slurmd", "4:memory:/slurm_node17/uid_1000/job_77/step_batch\n",
			Attribution{SlurmJobID: "77"}},
		{"slurm v2 slurmstepd", "0::/system.slice/slurmstepd.scope/job_4243/step_batch/user/task_0\n",
			Attribution{SlurmJobID: "4243", SystemdUnit: "slurmstepd.scope"}},
		{"job_ outside slurm is no job", "0::/system.slice/job_12.service\n", Attribution{SystemdUnit: "job_12.service"}},
		{"systemd service", "0::/system.slice/ssh.service\n", Attribution{SystemdUnit: "ssh.service"}},
		{"user session", "0::/user.slice/user-1000.slice/session-3.scope\n", Attribution{SystemdUnit: "session-3.scope"}},
		{"v2 wins over v1", "4:memory:/docker/" + hex("11111111") + "\n0::/system.slice/docker-" + hex("22222222") + ".scope\n",
			Attribution{ContainerID: hex("22222222"), Runtime: "docker", SystemdUnit: "docker-" + hex("22222222") + ".scope"}},
		{"cri-o cgroupfs", "0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/crio-" + hex("0123abcd") + "\n",
			Attribution{ContainerID: hex("0123abcd"), Runtime: "cri-o", PodUID: "11111111-2222-3333-4444-555555555555"}},
		{"cri-o cgroupfs conmon", "0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/crio-conmon-" + hex("0123abcd") + "\n",
			Attribution{PodUID: "11111111-2222-3333-4444-555555555555"}},
		{"kubelet --cgroup-root systemd (kind)", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_112233445566.slice/cri-containerd-" + hex("c0ffee00") + ".scope\n",
			Attribution{ContainerID: hex("c0ffee00"), Runtime: "containerd", PodUID: "1a2b3c4d-5e6f-7a8b-9c0d-112233445566", SystemdUnit: "cri-containerd-" + hex("c0ffee00") + ".scope"}},
		{"kubelet --cgroup-root cgroupfs", "4:memory:/kubelet/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/" + hex("fedcba98") + "\n",
			Attribution{ContainerID: hex("fedcba98"), PodUID: "11111111-2222-3333-4444-555555555555"}},
		{"pod outside kubepods is no pod", "0::/system.slice/pod1234/x\n", Attribution{}},
		{"slurm v2 multiple slurmd", "0::/system.slice/node17_slurmstepd.scope/job_4244/step_0/user/task_0\n",
			Attribution{SlurmJobID: "4244", SystemdUnit: "node17_slurmstepd.scope"}},
		{"short id is no container", "0::/docker/abc123\n", Attribution{}},
		{"job_ below a user's slurmstepd scope is no job", "0::/user.slice/user-1001.slice/user@1001.service/app.slice/slurmstepd.scope/job_777/step_0\n",
			Attribution{SystemdUnit: "slurmstepd.scope"}},
		{"job_ below a container's own slurmstepd scope is no job", "0::/system.slice/deleg.service/system.slice/slurmstepd.scope/job_777/step_0\n",
			Attribution{SystemdUnit: "slurmstepd.scope"}},
		{"kubepods below a user's unit is no pod", "0::/system.slice/deleg.service/kubepods-besteffort-pod1a2b_3c4d.slice/x\n",
			Attribution{SystemdUnit: "deleg.service"}},
		{"a pod's container naming another pod stays in its own", "0::/kubepods.slice/kubepods-podaa_bb.slice/cri-containerd-" + hex("c0ffee00") + ".scope/kubepods.slice/kubepods-podcc_dd.slice\n",
			Attribution{ContainerID: hex("c0ffee00"), Runtime: "containerd", PodUID: "aa-bb", SystemdUnit: "cri-containerd-" + hex("c0ffee00") + ".scope"}},
		{"root", "0::/\n", Attribution{}},
		{"malformed", "nonsense\n", Attribution{}},
	} {
		lines, got := ParseCgroup(tc.data)
		got.Dirs = OwnerDirs{} // TestParseCgroupOwnerDirs
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
		if len(lines) != strings.Count(tc.data, "\n") {
			t.Errorf("%s: %d lines kept", tc.name, len(lines))
		}
	}
	if lines, a := ParseCgroup(""); lines != nil || a != (Attribution{}) {
		t.Errorf("empty cgroup file: %q %+v", lines, a)
	}
}

// TestParseCgroupOwnerDirs: each id names the directory whose name carries
// it, in the hierarchy it was read from: what the owner rule reads.
func TestParseCgroupOwnerDirs(t *testing.T) {
	id := strings.Repeat("c0ffee00", 8)
	_, a := ParseCgroup("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaa_bb.slice/cri-containerd-" + id + ".scope\n" +
		"4:memory:/slurm/uid_1000/job_42/step_0\n")
	want := OwnerDirs{
		Container: OwnerDir{"", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaa_bb.slice/cri-containerd-" + id + ".scope"},
		Pod:       OwnerDir{"", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaa_bb.slice"},
		SlurmJob:  OwnerDir{"memory", "/slurm/uid_1000/job_42"},
	}
	if a.Dirs != want {
		t.Errorf("dirs:\n got %+v\nwant %+v", a.Dirs, want)
	}
}
