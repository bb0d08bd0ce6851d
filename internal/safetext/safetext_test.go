package safetext

import "testing"

func TestEscape(t *testing.T) {
	cases := []struct{ in, want string }{
		{"python3", "python3"},
		{"with space", "with space"},
		{"a\nb", `a\nb`},
		{"\x1b[2J\x1b[Hclean", `\x1b[2J\x1b[Hclean`},
		{"bad\xff\xfe", `bad\xff\xfe`},
		{`back\slash`, `back\\slash`},
		{"tab\there", `tab\there`},
		{"naïve", "naïve"},
		{"rtl\u202eexe.txt", `rtl\u202eexe.txt`},
		{"c1\u009bcontrol", `c1\u009bcontrol`},
		{"del\x7f", `del\x7f`},
	}
	for _, c := range cases {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestJoin(t *testing.T) {
	if got := Join([]string{"sh", "-c", "echo\x1b]0;x\x07"}); got != `sh -c echo\x1b]0;x\x07` {
		t.Errorf("Join = %q", got)
	}
}

func TestLine(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{`no such snapshot "\x1b[2J"`, `no such snapshot "\x1b[2J"`}, // already quoted: kept as it is
		{"open /tmp/a\x1b]0;pwned\a\xff: no such file", `open /tmp/a\x1b]0;pwned\x07\xff: no such file`},
		{`quoted "\\" and raw` + "\x1b", `quoted "\\" and raw\x1b`},
		{"a\nb", `a\nb`},
	}
	for _, c := range cases {
		if got := Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
