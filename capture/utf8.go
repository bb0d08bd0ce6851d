package capture

import (
	"strings"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/snapshot"
)

// makeValidUTF8 writes each byte of invalid UTF-8 in the process's parsed
// text as U+FFFD, as encoding/json does when storing, and keeps Raw texts as
// the kernel wrote them. A live capture must equal the same capture read back
// from the store, or diff would see an unchanged process with a hostile name
// as new.
func makeValidUTF8(p *snapshot.Process) {
	fix := func(s *string) {
		if !utf8.ValidString(*s) {
			*s = replaceInvalid(*s)
		}
	}
	fixAll := func(ss []string) {
		for i := range ss {
			fix(&ss[i])
		}
	}
	fix(&p.Comm)
	fixAll(p.Cmdline)
	fix(&p.Exe)
	fix(&p.User)
	fix(&p.PIDNamespace)
	fixAll(p.Cgroups)
	for _, s := range []*string{&p.ContainerID, &p.ContainerRuntime, &p.PodUID, &p.SlurmJobID, &p.SystemdUnit, &p.UnitRestart, &p.UnitTimer} {
		fix(s)
	}
	for _, ms := range [][]snapshot.Mapping{p.Mappings, p.SuspectAnon} {
		for i := range ms {
			fix(&ms[i].Path)
		}
	}
	for i := range p.Holders {
		fix(&p.Holders[i].Target)
	}
	// p.Raw stays the kernel's bytes, which its JSON carries exactly (raw_json.go).
	fixAll(p.Errors)
}

// replaceInvalid replaces every byte that does not start valid UTF-8 with
// U+FFFD. strings.ToValidUTF8 would fold a run of them into one, which JSON
// does not.
func replaceInvalid(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
