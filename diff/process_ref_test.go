package diff

import "testing"

func TestCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"0::/system.slice/docker-abc.scope"}, "/system.slice/docker-abc.scope"},
		{[]string{"12:memory:/slurm/uid_1000/job_42/step_0", "0::/"}, "/slurm/uid_1000/job_42/step_0"},
		{[]string{"1:name=systemd:/", "0::/"}, ""},
		{[]string{"0::/a:b"}, "/a:b"},
		{[]string{"garbage"}, ""},
	} {
		if got := cgroupPath(tc.lines); got != tc.want {
			t.Errorf("cgroupPath(%q) = %q, want %q", tc.lines, got, tc.want)
		}
	}
}
