package snapshot

import "testing"

func TestProcessKey(t *testing.T) {
	if k := ProcessKey(4242, 61000); k != "4242@61000" {
		t.Errorf("ProcessKey = %q", k)
	}
	if pid, start, ok := ParseProcessKey("4242@61000"); !ok || pid != 4242 || start != 61000 {
		t.Errorf("ParseProcessKey = %d %d %v", pid, start, ok)
	}
	for _, bad := range []string{"", "@", "42@", "@42", "+42@1", "-1@1", "42@1/..", "../42@1", "42@1@2", "42 @1", "4x@1", "99999999999999999999@1"} {
		if _, _, ok := ParseProcessKey(bad); ok {
			t.Errorf("ParseProcessKey(%q) parsed", bad)
		}
	}
}

func TestExeAndUserText(t *testing.T) {
	for _, tc := range []struct {
		exe     string
		deleted bool
		want    string
	}{{"/usr/bin/python3", false, "/usr/bin/python3"}, {"/tmp/x", true, "/tmp/x (deleted)"}, {"", true, ""}} {
		if got := ExeText(tc.exe, tc.deleted); got != tc.want {
			t.Errorf("ExeText(%q, %v) = %q, want %q", tc.exe, tc.deleted, got, tc.want)
		}
	}
	if UserText("bob", 1000) != "bob" || UserText("", 1000) != "uid 1000" {
		t.Errorf("UserText: %q %q", UserText("bob", 1000), UserText("", 1000))
	}
}
