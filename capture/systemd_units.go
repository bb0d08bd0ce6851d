package capture

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// unitDirs are systemd's system unit directories, most binding first, as
// systemd(1) reads them. An administrator's unit in /etc hides the
// package's of the same name in /usr/lib.
var unitDirs = []string{
	"etc/systemd/system", "run/systemd/system", "run/systemd/transient",
	"usr/local/lib/systemd/system", "usr/lib/systemd/system", "lib/systemd/system",
}

// Bounds on what the unit directories cost. They are root's files, but a
// host with thousands of units, or a planted huge one, must not cost a
// capture.
const (
	unitFileBytes  = 64 << 10 // one unit or drop-in file
	unitDropIns    = 16       // drop-ins read per unit directory
	unitTimerFiles = 512      // .timer files read per capture
)

// unitReader reads unit files under a root, each unit directory opened as an
// os.Root, so nothing is followed out of it (an /etc unit linked to a file in
// /usr/lib is read where that directory is read, a mask to /dev/null never).
type unitReader struct {
	dirs   []*os.Root
	notes  []string
	timers map[string]string // unit -> the timer that starts it, once read
}

// openUnits opens the unit directories under root that exist.
func openUnits(root string) *unitReader {
	u := &unitReader{}
	for _, d := range unitDirs {
		r, err := os.OpenRoot(filepath.Join(root, d))
		switch {
		case err == nil:
			u.dirs = append(u.dirs, r)
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission):
			u.notes = append(u.notes, "units: "+err.Error())
		}
	}
	return u
}

func (u *unitReader) close() {
	for _, r := range u.dirs {
		r.Close()
	}
}

// read reads a regular file of dir, bounded. A missing one is (nil, nil).
func (u *unitReader) read(dir *os.Root, name string) []byte {
	st, err := dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	switch {
	case err != nil:
		u.notes = append(u.notes, fmt.Sprintf("units: %s/%s: %s", dir.Name(), name, errText(err)))
		return nil
	case !st.Mode().IsRegular():
		// A link (an /etc unit aliased, or masked to /dev/null) is not
		// followed. The unit is read where its own directory holds it.
		return nil
	case st.Size() > unitFileBytes:
		u.notes = append(u.notes, fmt.Sprintf("units: %s/%s: larger than %d KiB (not read)", dir.Name(), name, unitFileBytes>>10))
		return nil
	}
	data, err := dir.ReadFile(name)
	if err != nil {
		u.notes = append(u.notes, fmt.Sprintf("units: %s/%s: %s", dir.Name(), name, errText(err)))
	}
	return data
}

// restart is the Restart= value of unit, from the first directory holding its
// file, then its drop-ins (unit.d/*.conf, in name order, each directory's),
// the last assignment winning as in systemd. "" where no file names it.
func (u *unitReader) restart(unit string) string {
	names := []string{unit}
	if at := strings.IndexByte(unit, '@'); at > 0 {
		// An instance (job@4242.service) runs its template's file.
		names = append(names, unit[:at+1]+".service")
	}
	value, found := "", false
	for _, name := range names {
		if i := slices.IndexFunc(u.dirs, func(d *os.Root) bool { return exists(d, name) }); i >= 0 {
			value, found = unitSetting(u.read(u.dirs[i], name), "Service", "Restart", value), true
			break
		}
	}
	if !found && slices.ContainsFunc(u.dirs, func(d *os.Root) bool { return linked(d, unit) }) {
		u.notes = append(u.notes, fmt.Sprintf("units: %s is a link to a file outside the unit directories, not followed: its Restart= is unknown", unit))
	}
	for _, name := range slices.Backward(names) { // the template's drop-ins, then the instance's
		for _, d := range u.dirs {
			for _, n := range u.dropIns(d, name+".d") {
				if data := u.read(d, name+".d/"+n); data != nil {
					value = unitSetting(data, "Service", "Restart", value)
				}
			}
		}
	}
	return value
}

// linked reports whether dir holds name as a symbolic link.
func linked(d *os.Root, name string) bool {
	st, err := d.Lstat(name)
	return err == nil && st.Mode()&fs.ModeSymlink != 0
}

// exists reports whether dir holds name as a regular file.
func exists(d *os.Root, name string) bool {
	st, err := d.Lstat(name)
	return err == nil && st.Mode().IsRegular()
}

// dropIns lists the .conf files of one drop-in directory, sorted, bounded.
func (u *unitReader) dropIns(d *os.Root, dir string) []string {
	f, err := d.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	names = slices.DeleteFunc(names, func(n string) bool { return !strings.HasSuffix(n, ".conf") })
	slices.Sort(names)
	if len(names) > unitDropIns {
		u.notes = append(u.notes, fmt.Sprintf("units: %s/%s: %d drop-ins, those past the first %d not read", d.Name(), dir, len(names), unitDropIns))
		names = names[:unitDropIns]
	}
	return names
}

// timer names the timer that starts unit, a .timer whose Unit= names it,
// or, without Unit=, whose name is the unit's with .timer for .service. The
// unit directories' timers are read once a capture, at most unitTimerFiles.
func (u *unitReader) timer(unit string) string {
	if u.timers == nil {
		u.readTimers()
	}
	return u.timers[unit]
}

func (u *unitReader) readTimers() {
	u.timers = map[string]string{}
	seen := map[string]bool{}
	read := 0
	for _, d := range u.dirs {
		f, err := d.Open(".")
		if err != nil {
			continue
		}
		names, _ := f.Readdirnames(-1)
		f.Close()
		slices.Sort(names)
		for _, n := range names {
			if !strings.HasSuffix(n, ".timer") || seen[n] {
				continue
			}
			seen[n] = true // a timer of /etc hides /usr/lib's of that name
			if read++; read > unitTimerFiles {
				u.notes = append(u.notes, fmt.Sprintf("units: more than %d timers; the rest were not read", unitTimerFiles))
				return
			}
			data := u.read(d, n)
			if data == nil {
				continue
			}
			target := unitSetting(data, "Timer", "Unit", strings.TrimSuffix(n, ".timer")+".service")
			if _, done := u.timers[target]; !done {
				u.timers[target] = n
			}
		}
	}
}

// unitSetting is the value of key in section of a unit file, the last
// assignment winning, starting from value (an earlier file's). An empty
// assignment resets it, as systemd's does. Lines it cannot parse are
// skipped, as a malformed unit is not a failed capture.
func unitSetting(data []byte, section, key, value string) string {
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), unitFileBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "["):
			in = line == "["+section+"]"
		case in:
			k, v, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(k) == key {
				value = string(procfs.Truncate([]byte(strings.TrimSpace(v)), 128))
			}
		}
	}
	return value
}

// readUnits gives each GPU user that runs under a systemd service its
// unit's Restart= value and the timer that starts it, from the unit
// directories under root ("" reads none).
func readUnits(root string, users []*snapshot.Process, scan *snapshot.Scan) {
	if root == "" {
		return
	}
	var u *unitReader
	for _, p := range users {
		if !strings.HasSuffix(p.SystemdUnit, ".service") || strings.ContainsAny(p.SystemdUnit, "/\x00") {
			continue // a scope (a session, a container) has no unit file
		}
		if u == nil {
			u = openUnits(root)
			defer u.close()
		}
		p.UnitRestart = u.restart(p.SystemdUnit)
		p.UnitTimer = u.timer(p.SystemdUnit)
	}
	if u != nil {
		scan.Errors = append(scan.Errors, u.notes...)
	}
}
