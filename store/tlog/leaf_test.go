package tlog

import (
	"strings"
	"testing"
)

// A leaf reads back as written, an id that holds a newline and a segment
// name that holds a space included. Any other text of it (a line added, a
// number not canonical) is refused.
func TestLeafRoundTrip(t *testing.T) {
	l := Leaf{Index: 7, Op: OpResult, Snapshots: []LeafSnapshot{{ID: "a\nop put", Digest: strings.Repeat("ab", 32)}, {ID: "b"}},
		Command: "diff", Findings: strings.Repeat("0", 64), Events: []EventSeal{{Segment: "events 1.jsonl", Line: 3, Seq: 9, Hash: "ff"}}}
	text := l.Marshal()
	back, err := ParseLeaf(text)
	if err != nil || string(back.Marshal()) != string(text) || back.Snapshots[0].ID != "a\nop put" || back.Snapshots[1].Digest != "" {
		t.Fatalf("%q read back as %+v (%v)", text, back, err)
	}
	for _, bad := range []string{
		string(text) + "op put\n",
		strings.Replace(string(text), "index 7", "index 07", 1),
		strings.Replace(string(text), leafHeader, "gpusnap-log-leaf/2", 1),
		strings.TrimSuffix(string(text), "\n"),
		strings.Replace(string(text), `"events 1.jsonl"`, `events`, 1),
		strings.Replace(string(text), `3 9 ff`, `3 9`, 1),
	} {
		if _, err := ParseLeaf([]byte(bad)); err == nil {
			t.Errorf("%q was read as a leaf", bad)
		}
	}
}

// A proof of the one leaf of a log of one verifies against that log's
// head, and not for another snapshot, another root or a leaf that stores
// none.
func TestInclusionProofOfOneLeaf(t *testing.T) {
	leaf := Leaf{Index: 0, Op: OpPut, Snapshots: []LeafSnapshot{{ID: "s1", Digest: strings.Repeat("cd", 32)}}}
	text := leaf.Marshal()
	p := InclusionProof{Snapshot: "s1", LeafIndex: 0, Leaf: string(text), Head: TreeHead{Origin: Origin("h"), Size: 1, Root: LeafHash(text)}}
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	other := p
	other.Snapshot = "s2"
	wrongRoot := p
	wrongRoot.Head.Root = LeafHash([]byte("x"))
	result := p
	result.Leaf = string(Leaf{Op: OpResult, Snapshots: leaf.Snapshots, Command: "check", Findings: "0"}.Marshal())
	for name, q := range map[string]InclusionProof{"another snapshot": other, "another root": wrongRoot, "a result leaf": result} {
		if err := q.Verify(); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}
