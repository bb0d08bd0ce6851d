package diff

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

const allowText = `# expected GPU workloads on this host
exe=/usr/bin/nv-hostengine user=root
cgroup=*/nvidia-persistenced.service
exe="/opt/my app/bin/*"	kind=unexpected_gpu_process
kind=zombie_gpu_memory gpu=GPU-0
`

func TestAllowDowngradesToInfo(t *testing.T) {
	a, err := ParseAllow(strings.NewReader(allowText), "allow.txt")
	if err != nil {
		t.Fatal(err)
	}
	dcgm := proc(900, 50, "nv-hostengine", "/usr/bin/nv-hostengine", holder(3, ctl, "rw", ctlNo),
		func(p *snapshot.Process) { p.User, p.UID = "root", 0 })
	dcgmBob := proc(901, 50, "nv-hostengine", "/usr/bin/nv-hostengine", holder(3, ctl, "rw", ctlNo))
	pd := proc(902, 50, "nvidia-persiste", "/usr/bin/nvidia-persistenced", holder(3, ctl, "rw", ctlNo),
		cgroups("1:name=systemd:/", "0::/system.slice/nvidia-persistenced.service"))
	app := proc(903, 50, "app", "/opt/my app/bin/app", holder(3, dev0, "r", dev0No))
	to := withGPUs(snap("b", dcgm, dcgmBob, pd, app), gpu(gib))
	r := Compare(withGPUs(snap("a"), gpu(0)), to, Options{ZombieThreshold: DefaultZombieThreshold, Allow: a})
	expect(t, r,
		"leftover_device_holder high 901 /dev/nvidiactl",
		"leftover_device_holder medium 903 /dev/nvidia0",
		"unexpected_gpu_process medium 901",
		"leftover_device_holder info 900 /dev/nvidiactl",
		"leftover_device_holder info 902 /dev/nvidiactl",
		"unexpected_gpu_process info 900",
		"unexpected_gpu_process info 902",
		"unexpected_gpu_process info 903",
		"zombie_gpu_memory info 0",
	)
	for _, f := range r.Findings {
		if (f.Severity == Info) != (f.Allowed != "") {
			t.Errorf("%s %s: allowed %q", f.Kind, f.Severity, f.Allowed)
		}
	}
	if got := r.Findings[3].Allowed; got != "allow.txt:2: exe=/usr/bin/nv-hostengine user=root" {
		t.Errorf("allowed = %q", got)
	}
	if r.Summary.Allowed != 6 || r.Summary.BySeverity["info"] != 6 || r.Summary.Worst != "high" {
		t.Errorf("summary = %+v", r.Summary)
	}
}

// foreign gives a process what the capture read of its code.
func foreign(c snapshot.ForeignCode) procOpt {
	return func(p *snapshot.Process) { p.ForeignCode = &c }
}

func TestAllowMatchesUIDAndGlobs(t *testing.T) {
	for _, tc := range []struct {
		entry string
		p     snapshot.Process
		want  bool
	}{
		{"user=1000", proc(1, 1, "a", "/a"), true},
		{"user=bob", proc(1, 1, "a", "/a"), true},
		{"user=alice", proc(1, 1, "a", "/a"), false},
		{"exe=/usr/*", proc(1, 1, "a", "/usr/lib/x/y"), true},
		{"exe=/usr/?", proc(1, 1, "a", "/usr/ab"), false},
		{"exe=/usr/l?b/*", proc(1, 1, "a", "/usr/lib/x"), true},
		{"exe=/usr/lib/x.so", proc(1, 1, "a", "/usr/lib/xXso"), false}, // . is literal
		{"comm=a exe=/b", proc(1, 1, "a", "/a"), false},                // every field must match
		{"slurm_job=42", proc(1, 1, "a", "/a", func(p *snapshot.Process) { p.SlurmJobID = "42" }), true},
		// an exe vouches for its file, not for code loaded beside it
		{"exe=/a", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{})), true},
		{"exe=/a", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{LoaderEnv: []string{"LD_PRELOAD=/tmp/x.so"}})), false},
		{"exe=/a", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{Mapped: []string{"/opt/x.so: no package installed it"}})), false},
		{"exe=/a", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{Unread: []string{"environ: permission denied"}})), false},
		{"user=bob", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{LoaderEnv: []string{"LD_PRELOAD=/tmp/x.so"}})), true},
		// an exe entry naming no cgroup is the host's program
		{"exe=/a", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{OtherMountNamespace: true})), false},
		{"exe=/a", proc(1, 1, "a", "/a", func(p *snapshot.Process) { p.ContainerID = "c0ffee" }), false},
		{"exe=/a", proc(1, 1, "a", "/a", func(p *snapshot.Process) { p.PodUID = "6b1f3c2a" }), false},
		{"exe=/a container=c0ffee", proc(1, 1, "a", "/a", func(p *snapshot.Process) { p.ContainerID = "c0ffee" }), true},
		{"exe=/a cgroup=/system.slice/*", proc(1, 1, "a", "/a", foreign(snapshot.ForeignCode{OtherMountNamespace: true}),
			func(p *snapshot.Process) { p.Cgroups = []string{"0::/system.slice/x.service"} }), true},
	} {
		a, err := ParseAllow(strings.NewReader(tc.entry), "t")
		if err != nil {
			t.Fatalf("%s: %v", tc.entry, err)
		}
		f := Finding{Kind: KindUnexpectedGPUProcess}
		if got := a.match(&f, &tc.p) != nil; got != tc.want {
			t.Errorf("%s on %s: %v, want %v", tc.entry, tc.p.Exe, got, tc.want)
		}
	}
	// An entry naming a process field never allows a finding with no process.
	a, _ := ParseAllow(strings.NewReader("exe=*"), "t")
	if a.match(&Finding{Kind: KindOrphanGPUProcess}, nil) != nil {
		t.Error("exe=* allowed a finding with no process")
	}
}

func TestAllowParseErrors(t *testing.T) {
	for text, want := range map[string]string{
		"exe":                      `f:1: want FIELD=PATTERN, got "exe"`,
		"# c\n\nfoo=bar":           `f:3: unknown field "foo"`,
		"exe=":                     "f:1: field exe has an empty pattern",
		`exe="/a b`:                "f:1: field exe: unterminated or bad quoted value",
		`exe="/a b"user=x`:         "f:1: field exe: want a space after the quoted value",
		"exe=/a =b":                `f:1: want FIELD=PATTERN, got "=b"`,
		"user=root exe=/x comm=y ": "",
	} {
		_, err := ParseAllow(strings.NewReader(text), "f")
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", text, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want %q", text, err, want)
		}
	}
	if _, err := LoadAllow("/nonexistent/allow"); err == nil || !strings.Contains(err.Error(), "/nonexistent/allow") {
		t.Errorf("missing file: %v", err)
	}
}

// An unprivileged tenant with a user and mount namespace binds its own
// binary over an allowed path and runs it: /proc/PID/exe, and the comm
// exec gives it, name the allowed program. The file it runs is not that
// package's file, and an exe pattern does not vouch for it.
func TestAllowExeNotForAModifiedFile(t *testing.T) {
	a, err := ParseAllow(strings.NewReader("exe=/usr/bin/nvidia-persistenced\n"), "allow.txt")
	if err != nil {
		t.Fatal(err)
	}
	pkg := func(status string) procOpt {
		return func(p *snapshot.Process) {
			p.Package = &snapshot.Package{Name: "nvidia-persistenced", Status: status}
		}
	}
	real := proc(900, 50, "nvidia-persiste", "/usr/bin/nvidia-persistenced", holder(3, dev0, "rw", dev0No), pkg(provenance.Verified))
	bound := proc(4242, 60, "nvidia-persiste", "/usr/bin/nvidia-persistenced", holder(3, "/dev/nvidia1", "rw", "195:1"), pkg(provenance.Modified))
	to := withGPUs(snap("now", real, bound), gpuN(0, "GPU-0", 1<<20), gpuN(1, "GPU-1", 1<<20))
	r := Check(to, CheckOptions{ZombieThreshold: DefaultZombieThreshold, Allow: a})
	expect(t, r, "gpu_in_use high 4242 /dev/nvidia1", "gpu_in_use info 900 /dev/nvidia0")
}

// Where the capture read foreign code (the live /proc), an exe entry vouches
// only for a process whose code it read: one it did not read may run a
// tenant's LD_PRELOAD library all the same. A tree's snapshot reads no
// process's code, and its exe entries match by the path alone.
func TestAllowExeNotWhereCodeWasNotRead(t *testing.T) {
	read := func(p *snapshot.Process) { p.ForeignCode = &snapshot.ForeignCode{} }
	looked := proc(900, 50, "trainer", "/opt/trainer", holder(3, dev0, "rw", dev0No), read)
	unread := proc(4242, 60, "trainer", "/opt/trainer", holder(3, dev0, "rw", dev0No))
	for _, live := range []bool{true, false} {
		to := withGPUs(snap("now", looked, unread), gpuN(0, "GPU-0", 1<<20))
		to.Scan.CodeRead = live
		want := []string{"gpu_in_use info 900 /dev/nvidia0", "gpu_in_use info 4242 /dev/nvidia0"}
		if live {
			want = []string{"gpu_in_use high 4242 /dev/nvidia0", "gpu_in_use info 900 /dev/nvidia0"}
		}
		expect(t, check(t, to, "", "exe=/opt/trainer\n"), want...)
	}
}

// An allow entry that names a device by path trusts the name only where the
// device's number agrees with it: a tenant in its own mount namespace binds
// /dev/nvidia0 over /dev/nvidiactl and opens it.
func TestAllowDeviceNotForAMisnamedNode(t *testing.T) {
	honest := proc(900, 50, "trainer", "/opt/trainer", holder(3, ctl, "rw", ctlNo))
	bound := proc(4242, 60, "trainer", "/opt/trainer", holder(3, ctl, "rw", ctlNo), holder(4, ctl, "rw", "195:0"))
	to := withGPUs(snap("now", honest, bound), gpuN(0, "GPU-0", 1<<20))
	// The process that lied about one node's name is not vouched for on
	// that path at all.
	expect(t, check(t, to, "", "device=/dev/nvidiactl\n"),
		"gpu_in_use high 4242 /dev/nvidiactl",
		"gpu_in_use high 4242 /dev/nvidiactl",
		"gpu_in_use info 900 /dev/nvidiactl")
	r := check(t, to, "0", "device=/dev/nvidiactl\n")
	expect(t, r, "gpu_in_use high 4242 /dev/nvidiactl")
	if f := first(t, r); f.GPUUUID != "GPU-0" || !strings.Contains(strings.Join(f.Evidence, "\n"), "195:0") {
		t.Errorf("the misnamed node: %+v", f)
	}
}

// A tenant whose user manager delegates it a cgroup subtree names a cgroup
// there for another's container and moves into it: the capture reads that
// container's id, and a container entry does not vouch for it.
func TestAllowOwnerNotFromASelfNamedCgroup(t *testing.T) {
	id := "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
	in := func(cgroup string) procOpt {
		return func(p *snapshot.Process) { p.ContainerID, p.Cgroups = id, []string{"0::" + cgroup} }
	}
	real := proc(900, 50, "dcgm", "/usr/bin/nv-hostengine", holder(3, dev0, "rw", dev0No), in("/system.slice/docker-"+id+".scope"))
	forged := proc(4242, 60, "dcgm", "/usr/bin/nv-hostengine", holder(3, dev0, "rw", dev0No),
		in("/user.slice/user-1001.slice/user@1001.service/docker-"+id+".scope"))
	to := withGPUs(snap("now", real, forged), gpuN(0, "GPU-0", 1<<20))
	expect(t, check(t, to, "", "container="+id+"\n"), "gpu_in_use high 4242 /dev/nvidia0", "gpu_in_use info 900 /dev/nvidia0")
}

// An exe no package installed is pinned by its SHA-256: the entry passes the
// file it names and not another binary put at that path; an exe pattern
// outside the packages' directories without a pin is named as weak.
func TestAllowSHA256Pin(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	run := func(hash, status string) procOpt {
		return func(p *snapshot.Process) { p.ExeSHA256, p.HashStatus = hash, status }
	}
	a, err := ParseAllow(strings.NewReader("exe=/opt/infer/bin/server sha256="+sum+"\nexe=/usr/bin/nv-hostengine\nexe=/opt/other/*\nexe=*/sleep\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    snapshot.Process
		want bool
	}{
		{proc(1, 1, "server", "/opt/infer/bin/server", run(sum, snapshot.HashOK)), true},
		{proc(1, 1, "server", "/opt/infer/bin/server", run(strings.Repeat("cd", 32), snapshot.HashOK)), false},
		{proc(1, 1, "server", "/opt/infer/bin/server", run("", snapshot.HashTooLarge)), false},
	} {
		f := Finding{Kind: KindUnexpectedGPUProcess}
		if got := a.match(&f, &tc.p) != nil; got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.p.ExeSHA256, tc.p.HashStatus, got, tc.want)
		}
	}
	if want := []string{"t:3: exe=/opt/other/*", "t:4: exe=*/sleep"}; !slices.Equal(a.Weak, want) {
		t.Errorf("weak entries %q, want %q", a.Weak, want)
	}
}
