package snapshot_test

import (
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestSelfNamedCgroup(t *testing.T) {
	id := "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
	for _, c := range []struct {
		name    string
		cgroups []string
		want    bool
	}{
		{"docker", []string{"0::/system.slice/docker-" + id + ".scope"}, false},
		{"kubelet", []string{"0::/kubepods.slice/kubepods-pod1234_5678.slice/cri-containerd-" + id + ".scope"}, false},
		{"a login session", []string{"0::/user.slice/user-1001.slice/session-3.scope"}, false},
		{"a name a tenant chose", []string{"0::/user.slice/user-1001.slice/user@1001.service/docker-" + id + ".scope"}, true},
		{"v1, the systemd hierarchy", []string{"12:memory:/", "1:name=systemd:/user.slice/user-1001.slice/user@1001.service/app.slice/x.scope"}, true},
		{"no cgroup read", nil, false},
	} {
		p := &snapshot.Process{Cgroups: c.cgroups}
		if got := p.SelfNamedCgroup(); got != c.want {
			t.Errorf("%s: SelfNamedCgroup() = %v, want %v", c.name, got, c.want)
		}
	}
}
