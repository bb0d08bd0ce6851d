package kmsg

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestParse(t *testing.T) {
	r, err := Parse([]byte(`4,1005,812000000,-,caller=T4242,future=1;NVRM: Xid (PCI:0000:3b:00): 13, pid=4242`), [][]byte{[]byte("SUBSYSTEM=pci")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Seq != 1005 || r.Facility != 0 || r.Level != 4 || r.USec != 812000000 || r.Flags != "-" || r.Caller != "T4242" ||
		r.Text != "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242" || len(r.Dict) != 1 || r.Dict[0] != "SUBSYSTEM=pci" {
		t.Fatalf("parsed %+v", r)
	}
	if got, want := r.Line(), "4,1005,812000000,-,caller=T4242;NVRM: Xid (PCI:0000:3b:00): 13, pid=4242\n SUBSYSTEM=pci\n"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	// A user-space record: LOG_USER (1) << 3 | warning (4).
	if r, _ := Parse([]byte("12,7,1,-;hello"), nil); r.Facility != 1 || r.Level != 4 || r.FromKernel() {
		t.Errorf("12 parsed as facility %d level %d", r.Facility, r.Level)
	}
	for _, bad := range []string{"", "no header", "4,1;x", "4,1,2;x", "x,1,2,-;t", "4,-1,2,-;t", "4,1,2x,-;t", "4,99999999999999999999999,1,-;t", "99999999999,1,1,-;t"} {
		if _, err := Parse([]byte(bad), nil); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestParseXid(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Xid
	}{
		{"NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
			Xid{Number: 79, PCI: "0000:3b:00", PID: 4242, Name: "python3", Message: "GPU has fallen off the bus."}},
		{"NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000000a1b2c3) Marked for Remapping, reset gpu to activate.",
			Xid{Number: 63, PCI: "0000:3b:00", Message: "Row Remapper: New row (0x0000000000a1b2c3) Marked for Remapping, reset gpu to activate."}},
		{"NVRM: Xid (0000:86:00): 45, Ch 00000020", Xid{Number: 45, PCI: "0000:86:00", Message: "Ch 00000020"}},
		{"NVRM: Xid (PCI:0000:3b:00): 43, pid=4242, name=python3, Ch 00000008",
			Xid{Number: 43, PCI: "0000:3b:00", PID: 4242, Name: "python3", Message: "Ch 00000008"}},
		// A process name is the tenant's: ", pid=" inside it cannot replace the driver's PID.
		{"NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=x, pid=1, Ch 00000008",
			Xid{Number: 31, PCI: "0000:3b:00", PID: 4242, Name: "x", Message: "pid=1, Ch 00000008"}},
		{"nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
			Xid{Switch: true, Number: 20034, PCI: "0000:07:00.0", Fatal: true, Message: "Link 30 LTSSM Fault Up"}},
		{"nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
			Xid{Switch: true, Number: 12028, PCI: "0000:05:00.0", Message: "Link 32 egress non-posted PRIV error (First)"}},
	} {
		got, ok := ParseXid(tc.text)
		if !ok || got != tc.want {
			t.Errorf("ParseXid(%q) = %+v, %v; want %+v", tc.text, got, ok, tc.want)
		}
		if !IsDriverText(tc.text) {
			t.Errorf("IsDriverText(%q) = false", tc.text)
		}
	}
	for _, text := range []string{"NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", "Xid 79", "NVRM: Xid (PCI:zz): 79, x"} {
		if x, ok := ParseXid(text); ok {
			t.Errorf("ParseXid(%q) = %+v", text, x)
		}
	}
	for _, text := range []string{"NVRM: loading NVIDIA UNIX x86_64 Kernel Module", "nvidia-uvm: Loaded the UVM driver", "nvidia-nvswitch0: probing", "hello Xid (PCI:0000:3b:00): 79"} {
		if !IsDriverText(text) {
			t.Errorf("IsDriverText(%q) = false", text)
		}
	}
	for _, text := range []string{"systemd[1]: Started session-4.scope", "loop0: detected capacity change", "my-nvidia: not the driver"} {
		if IsDriverText(text) {
			t.Errorf("IsDriverText(%q) = true", text)
		}
	}
}

func TestReadPositionFile(t *testing.T) {
	pos := ReadPosition("testdata/window.kmsg")
	if pos.Unavailable != "" || pos.First != 1000 || pos.Next != 1022 {
		t.Fatalf("position %+v", pos)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	if pos := ReadPosition(empty); pos.Unavailable != "" || pos.Next != 0 {
		t.Fatalf("empty log: %+v", pos)
	}
}

func TestReadWindow(t *testing.T) {
	from := &snapshot.KernelLogPosition{Source: "f", BootID: "boot-a", First: 1000, Next: 1005}
	to := &snapshot.KernelLogPosition{Source: "f", BootID: "boot-a", First: 1000, Next: 1021}
	w := ReadWindow("testdata/window.kmsg", from, to)
	if len(w.Missing) != 0 {
		t.Fatalf("missing: %q", w.Missing)
	}
	if len(w.Records) != 16 || w.Records[0].Seq != 1005 || w.Records[15].Seq != 1020 {
		t.Fatalf("%d records, %+v", len(w.Records), w.Records)
	}
	if r := w.Records[4]; r.Seq != 1009 || len(r.Dict) != 2 || r.Dict[1] != "DEVICE=+pci:0000:3b:00.0" {
		t.Errorf("continuation lines: %+v", r)
	}
	if r := w.Records[14]; r.Text != `sshd[3210]: the text of a user\x0amessage with a newline\x5c` {
		t.Errorf("escaped text changed: %q", r.Text)
	}

	// An empty window reads nothing.
	if w := ReadWindow("/nonexistent", to, to); len(w.Records) != 0 || len(w.Missing) != 0 {
		t.Errorf("empty window: %+v", w)
	}
}

func TestReadWindowSaysWhatIsMissing(t *testing.T) {
	at := func(boot string, next uint64) *snapshot.KernelLogPosition {
		return &snapshot.KernelLogPosition{Source: "f", BootID: boot, Next: next}
	}
	for _, tc := range []struct {
		name     string
		path     string
		from, to *snapshot.KernelLogPosition
		records  int
		missing  string
	}{
		{"ring wrapped", "testdata/wrapped.kmsg", at("a", 1005), at("a", 1021), 11, "records 1005 to 1009 were overwritten"},
		{"log ends early", "testdata/window.kmsg", at("a", 1005), at("a", 1030), 17, "records 1022 to 1029 of the window are not in the log"},
		{"another boot", "testdata/window.kmsg", at("a", 5000), at("b", 1003), 3, "FROM and TO are in different boots"},
		{"no position at FROM", "testdata/window.kmsg", nil, at("a", 1021), 0, "FROM recorded no kernel-log position"},
		{"unread at TO", "testdata/window.kmsg", at("a", 1005), &snapshot.KernelLogPosition{Unavailable: "permission denied"}, 0, "not read at TO (permission denied)"},
		{"positions of two logs", "testdata/window.kmsg", at("a", 1021), at("a", 1005), 0, "precedes FROM's"},
		{"no log", "/nonexistent/kmsg", at("a", 1005), at("a", 1021), 0, "could not be read: /nonexistent/kmsg: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := ReadWindow(tc.path, tc.from, tc.to)
			if len(w.Records) != tc.records {
				t.Errorf("%d records, want %d", len(w.Records), tc.records)
			}
			if !strings.Contains(strings.Join(w.Missing, "\n"), tc.missing) {
				t.Errorf("missing %q, want %q in it", w.Missing, tc.missing)
			}
		})
	}
}

// A file is not the device: a line far past MaxText is cut, and its length
// and hash say what was cut; a FIFO, a directory and another device are refused
// without blocking.
func TestReadBounds(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("A", 3*MaxText+17)
	path := filepath.Join(dir, "long")
	os.WriteFile(path, []byte("6,1,1,-;before\n4,2,2,-;NVRM: "+long+"\n"+strings.Repeat(" K=V\n", 2)+"6,3,3,-;after\n"), 0o600)
	w := ReadWindow(path, &snapshot.KernelLogPosition{Next: 1}, &snapshot.KernelLogPosition{Next: 4})
	if len(w.Missing) != 0 || len(w.Records) != 3 {
		t.Fatalf("records %d, missing %q", len(w.Records), w.Missing)
	}
	r := w.Records[1]
	sum := sha256.Sum256([]byte("NVRM: " + long))
	if len(r.Text) != MaxText || r.Cut == nil || r.Cut.TextLen != len(long)+6 || r.Cut.TextSHA256 != hex.EncodeToString(sum[:]) || len(r.Dict) != 0 { // the bound covers the dictionary too
		t.Errorf("long record: text %d bytes, cut %+v, dict %d", len(r.Text), r.Cut, len(r.Dict))
	}
	if w.Records[2].Text != "after" {
		t.Errorf("the record after a long one: %+v", w.Records[2])
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan snapshot.KernelLogPosition)
	go func() { done <- ReadPosition(fifo) }()
	select {
	case pos := <-done:
		if !strings.Contains(pos.Unavailable, "neither the kernel log device nor a regular file") {
			t.Errorf("fifo: %+v", pos)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if pos := ReadPosition("/dev/null"); !strings.Contains(pos.Unavailable, "not the kernel log") {
		t.Errorf("/dev/null: %+v", pos)
	}
	if pos := ReadPosition(dir); pos.Unavailable == "" {
		t.Errorf("a directory: %+v", pos)
	}
}

// Records of every length, around the file reader's buffer and past
// MaxText, with dictionaries: each is read whole wherever the reads cut
// the file, and bounded by the same rule as one parsed alone.
func TestReadWindowAcrossReads(t *testing.T) {
	var file strings.Builder
	type want struct {
		text string
		dict []string
		cut  *Cut
	}
	var wants []want
	lengths := []int{0, 1, 80, fileBuffer - 40, fileBuffer + 1, 2 * fileBuffer, MaxText - 10, MaxText + 100, MaxText + 300, 3*MaxText + 5, 70}
	for i := range 150 {
		n := lengths[i%len(lengths)] + i%7
		text := strings.Repeat(string(rune('a'+i%26)), n)
		var dict []string
		for d := range i % 4 {
			dict = append(dict, fmt.Sprintf("K%d=%s", d, strings.Repeat("v", (i*37+d*fileBuffer/3)%(fileBuffer+500))))
		}
		fmt.Fprintf(&file, "6,%d,%d,-;%s\n", 100+i, i, text)
		for _, d := range dict {
			file.WriteString(" " + d + "\n")
		}
		if i%5 == 0 {
			file.WriteString("\n") // a blank line between records
		}
		w := want{text: text}
		if len(text) > MaxText {
			sum := sha256.Sum256([]byte(text))
			w.text, w.cut = text[:MaxText], &Cut{TextLen: len(text), TextSHA256: hex.EncodeToString(sum[:])}
		}
		kept := len(w.text)
		for _, d := range dict {
			if kept+len(d) > MaxText {
				break
			}
			kept += len(d)
			w.dict = append(w.dict, d)
		}
		wants = append(wants, w)
	}
	path := filepath.Join(t.TempDir(), "kmsg")
	os.WriteFile(path, []byte(strings.TrimSuffix(file.String(), "\n")), 0o600) // the last line has no newline
	w := ReadWindow(path, &snapshot.KernelLogPosition{Next: 100}, &snapshot.KernelLogPosition{Next: 100 + uint64(len(wants))})
	if len(w.Missing) != 0 || len(w.Records) != len(wants) {
		t.Fatalf("%d records, missing %q", len(w.Records), w.Missing)
	}
	for i, r := range w.Records {
		wt := wants[i]
		if r.Seq != uint64(100+i) || r.Text != wt.text || !slices.Equal(r.Dict, wt.dict) || !reflect.DeepEqual(r.Cut, wt.cut) {
			t.Fatalf("record %d: text %d bytes (want %d), %d dictionary lines (want %d), cut %+v (want %+v)",
				100+i, len(r.Text), len(wt.text), len(r.Dict), len(wt.dict), r.Cut, wt.cut)
		}
	}
}
