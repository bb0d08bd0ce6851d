package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// The default allow list is trusted only where root alone could have
// written it: a root-owned regular file that its group and others cannot
// write. A link, another owner or a writable mode is refused.
func TestDefaultAllowRootsAlone(t *testing.T) {
	testenv.Root(t, "makes files of another owner")
	dir := t.TempDir()
	list := filepath.Join(dir, "allow.list")
	if err := os.WriteFile(list, []byte("exe=/usr/bin/x cgroup=/system.slice/x.service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(list, link); err != nil {
		t.Fatal(err)
	}
	check := func(name, path string, refused bool) {
		t.Helper()
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := rootsAlone(fi); (err != nil) != refused {
			t.Errorf("%s: %v, want refused %v", name, err, refused)
		}
	}
	check("root's, 0644", list, false)
	check("a link to it", link, true)
	if err := os.Chmod(list, 0o664); err != nil {
		t.Fatal(err)
	}
	check("group-writable", list, true)
	if err := os.Chmod(list, 0o644); err != nil || os.Chown(list, 65534, 65534) != nil {
		t.Fatal("chmod or chown")
	}
	check("nobody's", list, true)
}
