package lazyregexp

import "testing"

func TestCompiledOnceOnFirstUse(t *testing.T) {
	re := New(`^a+$`)
	if first := re(); first != re() || !first.MatchString("aaa") || first.MatchString("b") {
		t.Error("want one compiled pattern that matches a+")
	}
	bad := New(`(`) // not compiled until used: no panic here
	defer func() {
		if recover() == nil {
			t.Error("an invalid pattern did not panic on first use")
		}
	}()
	bad()
}
