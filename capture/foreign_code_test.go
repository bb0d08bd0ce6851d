package capture

import (
	"slices"
	"strings"
	"testing"
)

// TestExecutableMappings: of maps text, the executable mappings of no file
// or of a deleted one are named, the vDSO is the kernel's, and the other
// files (exe aside) are listed once each for dpkg.
func TestExecutableMappings(t *testing.T) {
	maps := `55d0c0000000-55d0c0002000 r-xp 00002000 fd:01 131 /usr/bin/sleep
7f0000000000-7f0000001000 r-xp 00001000 fd:01 200 /var/lib/x/libgrab.so
7f0000010000-7f0000020000 r-xp 00000000 fd:01 201 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000020000-7f0000021000 r--p 00000000 fd:01 201 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000030000-7f0000040000 r-xp 00000000 fd:01 201 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000050000-7f0000051000 rwxp 00000000 00:00 0 
7f0000060000-7f0000061000 r-xp 00000000 00:01 7 /memfd:x (deleted)
7f0000070000-7f0000071000 r-xp 00000000 fd:01 9 /tmp/my lib.so (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
`
	foreign, files := executableMappings([]byte(maps), "/usr/bin/sleep")
	wantForeign := []string{"anonymous 7f0000050000-7f0000051000", "/memfd:x (deleted)", "/tmp/my lib.so (deleted)"}
	wantFiles := []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/var/lib/x/libgrab.so"}
	if !slices.Equal(foreign, wantForeign) || !slices.Equal(files, wantFiles) {
		t.Errorf("foreign %q, files %q\nwant %q, %q", foreign, files, wantForeign, wantFiles)
	}
}

// TestLoaderEnv: the loader's variables are found anywhere in an
// environment, a value cut at its bound; a name that only ends alike is not.
func TestLoaderEnv(t *testing.T) {
	long := "LD_LIBRARY_PATH=" + strings.Repeat("/a", 500)
	env := "PATH=/bin\x00XLD_PRELOAD=/no\x00LD_PRELOAD=/tmp/x.so\x00" + long + "\x00"
	got := loaderEnv([]byte(env))
	if len(got) != 2 || got[0] != "LD_PRELOAD=/tmp/x.so" || len(got[1]) != len("LD_LIBRARY_PATH=")+loaderValueLimit {
		t.Errorf("loaderEnv: %q", got)
	}
}
