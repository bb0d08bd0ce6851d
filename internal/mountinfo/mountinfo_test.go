package mountinfo

import (
	"strconv"
	"strings"
	"testing"
)

// TestParseLine holds ParseLine to mountinfo lines, a rejected one's want
// the zero Mount.
func TestParseLine(t *testing.T) {
	cases := map[string]Mount{
		"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue": {36, "98:0", "/mnt2", "/mnt1", "ext3"},
		"40 36 0:44 / /run/a\\040b rw,nosuid - fuse.tenantfs tenantfs rw,user_id=0\n":    {40, "0:44", "/run/a\\040b", "/", "fuse.tenantfs"},
		"40 36 0:44 / /run/x rw":              {},
		"x 36 0:44 / /run/x rw - tmpfs tmpfs": {},
		"40 36 0:44 / - tmpfs":                {},
	}
	for line, want := range cases {
		if got, ok := ParseLine(line); got != want || ok != (want != Mount{}) {
			t.Errorf("%q: %+v %v, want %+v", line, got, ok, want)
		}
	}
}

func TestServed(t *testing.T) {
	for fstype, want := range map[string]bool{"fuse": true, "fuseblk": true, "fuse.sshfs": true, "fusectl": false, "ext4": false, "": false} {
		if Served(fstype) != want {
			t.Errorf("%q: served %v, want %v", fstype, !want, want)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue")
	f.Add("40 36 0:44 / /run/x rw,nosuid - fuse.tenantfs tenantfs rw,user_id=0")
	f.Add("1 2 3 - ")
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := ParseLine(line)
		if !ok {
			return
		}
		id, err := strconv.ParseUint(strings.Fields(line)[0], 10, 64)
		if !strings.Contains(line, " - ") || m.FSType == "" || strings.ContainsAny(m.FSType+m.Dev+m.Point+m.Root, " \t\n") || err != nil || id != m.ID {
			t.Fatalf("accepted %+v from %q", m, line)
		}
	})
}
