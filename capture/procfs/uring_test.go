package procfs

import (
	"fmt"
	"testing"
)

// ringInfo is the fdinfo of an io_uring fd as Linux 6.18 writes it, with
// three slots, two holding files: one of them a node whose path has a space
// (escaped \040) and that was deleted (" (deleted)", escaped as well).
const ringInfo = "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t21125\nSqMask:\t0x3\nSqHead:\t0\nSqTail:\t0\n" +
	"CachedSqHead:\t0\nCqMask:\t0x7\nCqHead:\t0\nCqTail:\t0\nCachedCqTail:\t0\nSQEs:\t0\nCQEs:\t0\n" +
	"SqThread:\t-1\nSqThreadCpu:\t-1\nSqTotalTime:\t0\nSqWorkTime:\t0\nUserFiles:\t3\n" +
	"    0: /dev/nvidia0\n    2: /srv/my\\040job/dev/nvidia1\\040(deleted)\nUserBufs:\t0\nPollList:\nCqOverflowList:\nNAPI:\tdisabled\n"

func TestParseRingFiles(t *testing.T) {
	slots, files, ok := ParseRingFiles([]byte(ringInfo))
	got := fmt.Sprint(slots, ok)
	for _, f := range files {
		got += fmt.Sprintf(" %d=%q", f.Slot, f.Path)
	}
	if want := `3 true 0="/dev/nvidia0" 2="/srv/my job/dev/nvidia1 (deleted)"`; got != want {
		t.Errorf("parsed %s, want %s", got, want)
	}
	// The ring's lock was busy: the count, no file.
	if slots, files, ok := ParseRingFiles([]byte("UserFiles:\t4\nUserBufs:\t0\n")); slots != 4 || len(files) != 0 || !ok {
		t.Errorf("busy ring: %d slots, %d files, ok %v", slots, len(files), ok)
	}
	// No count at all (a kernel format this parser does not know).
	if _, _, ok := ParseRingFiles([]byte("pos:\t0\nflags:\t02\n")); ok {
		t.Error("an fdinfo without UserFiles parsed as a ring's")
	}
	// A backslash not followed by three octal digits is kept.
	if got := string(unescapeOctal([]byte(`/dev/a\9b\04`))); got != `/dev/a\9b\04` {
		t.Errorf("unescapeOctal kept %q", got)
	}
}
