package diff

import (
	"fmt"
	"strings"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// signContext is what the line of a compromise rule depends on besides the
// process, whether a job's cgroup, which only root makes, vouches for it,
// and whether it runs as that job's user.
type signContext struct {
	inJob    bool // its own cgroup names the job it is judged in (the tenant's, or in ps any job's)
	otherJob bool // its own cgroup names another job than the tenant's
	// jobUIDs are the uids the job's other processes run as, empty when
	// the job has no other process to compare with.
	jobUIDs map[int]bool
}

// compromiseRule is one rule of compromiseSigns, with an id (a row of
// docs/triage.md's Compromise signs), the doc's words for when it gives a
// sign and when only a note, and its test, which gives a sign that the
// process lies, or a note for why.
type compromiseRule struct {
	id, sign, note string
	test           func(p *snapshot.Process, ctx signContext) (lie, note string)
}

// compromiseRules are the rules compromiseSigns applies, in order.
var compromiseRules = []compromiseRule{
	{"kernel-thread-name", "a user process named like a kernel thread", "", func(p *snapshot.Process, _ signContext) (string, string) {
		if !p.KernelThread && kernelThreadName().MatchString(p.Comm) {
			return fmt.Sprintf("masquerade: a user process named like a kernel thread (comm \"%s\")", p.Comm), ""
		}
		return "", ""
	}},
	{"dev-shm", "its exe lies under /dev/shm", "", func(p *snapshot.Process, _ signContext) (string, string) {
		if strings.HasPrefix(p.Exe, "/dev/shm/") {
			return fmt.Sprintf("masquerade: exe %s lies under /dev/shm", p.Exe), ""
		}
		return "", ""
	}},
	{"temp-dir", "its exe lies under /tmp or /var/tmp",
		"its name is its exe's, it runs as its job's user and its own cgroup (which only root makes) is the job's: a job's own build in its `$TMPDIR`", tempDirSign},
	{"hidden-dir", "its exe lies under a hidden directory outside per-user toolchains and build caches",
		"another job's cgroup (which only root makes) vouches for it: `another_tenant`, the path in `why`", func(p *snapshot.Process, ctx signContext) (string, string) {
			hidden := ""
			if p.Exe != "" {
				hidden = hiddenElement(p.Exe)
			}
			switch {
			case hidden == "":
				return "", ""
			case ctx.otherJob:
				return "", fmt.Sprintf("its exe %s lies under hidden %s, which would be masquerade, but its job's cgroup vouches for the process", p.Exe, hidden)
			}
			return fmt.Sprintf("masquerade: exe %s lies under hidden %s", p.Exe, hidden), ""
		}},
	{"deleted-exe", "its exe was deleted after it started", "", func(p *snapshot.Process, _ signContext) (string, string) {
		if p.Exe != "" && p.ExeDeleted {
			return fmt.Sprintf("masquerade: exe %s was deleted after the process started", p.Exe), ""
		}
		return "", ""
	}},
	{"name-lies", "its comm is not its exe's name (an interpreter's comm excepted)", "", func(p *snapshot.Process, _ signContext) (string, string) {
		if p.Exe != "" && !commMatchesExe(p.Comm, p.Exe) {
			return fmt.Sprintf("masquerade: comm \"%s\" disagrees with exe %s", p.Comm, p.Exe), ""
		}
		return "", ""
	}},
	{"unexpected-user", "it runs in a job's cgroup as a uid no other process of that job runs as", "", func(p *snapshot.Process, ctx signContext) (string, string) {
		if (ctx.inJob || ctx.otherJob) && len(ctx.jobUIDs) > 0 && !ctx.jobUIDs[p.UID] {
			return fmt.Sprintf("it runs as %s, a user none of its job's other processes runs as", snapshot.UserText(p.User, p.UID)), ""
		}
		return "", ""
	}},
	{"modified-package", "its exe differs from its package's file (dpkg md5sums)", "", func(p *snapshot.Process, _ signContext) (string, string) {
		if pk := p.Package; pk != nil && pk.Status == provenance.Modified {
			return fmt.Sprintf("exe %s differs from package %s's file (dpkg md5sums)", p.Exe, pk.Name), ""
		}
		return "", ""
	}},
	{"unpackaged-system-exe", "its exe lies in a system directory, yet no package installed it", "", func(p *snapshot.Process, _ signContext) (string, string) {
		if pk := p.Package; pk != nil && pk.Status == provenance.NotPackaged && snapshot.InSystemDir(p.Exe) {
			return fmt.Sprintf("exe %s lies in a system directory, yet no package installed it", p.Exe), ""
		}
		return "", ""
	}},
	{"pool-egress", "it holds a connection to a mining-pool port", "", func(p *snapshot.Process, _ signContext) (string, string) {
		for _, s := range p.Sockets {
			if s.Peer() && miningPoolPorts[s.RemotePort()] {
				return fmt.Sprintf("%s connection to %s%s: a mining-pool port", s.Proto, s.Remote, viaText(s)), ""
			}
		}
		return "", ""
	}},
}

// tempDirSign tells a job's binary built in its $TMPDIR, which is what the
// job runs, from a dropper's. The same path with a name that lies, another
// user or no job's cgroup around it is a dropper's.
func tempDirSign(p *snapshot.Process, ctx signContext) (string, string) {
	dir := ""
	for _, d := range []string{"/tmp/", "/var/tmp/"} {
		if strings.HasPrefix(p.Exe, d) {
			dir = strings.TrimSuffix(d, "/")
		}
	}
	switch {
	case dir == "":
		return "", ""
	case ctx.inJob && commMatchesExe(p.Comm, p.Exe) && (len(ctx.jobUIDs) == 0 || ctx.jobUIDs[p.UID]):
		return "", fmt.Sprintf("its exe %s lies under %s, but its name is its exe's and it runs as its job's user in the job's cgroup: a job's own build, no sign by itself", p.Exe, dir)
	}
	return fmt.Sprintf("masquerade: exe %s lies under %s", p.Exe, dir), ""
}

// compromiseSigns lists the signs that p lies about what it is, by
// compromiseRules, and the notes of evidence that is no sign on its own.
func compromiseSigns(p *snapshot.Process, ctx signContext) (lies, notes []string) {
	for _, r := range compromiseRules {
		lie, note := r.test(p, ctx)
		if lie != "" {
			lies = append(lies, lie)
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	return lies, notes
}
