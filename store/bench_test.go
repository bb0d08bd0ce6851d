package store

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// BenchmarkGet loads one snapshot of 600 processes: what show pays.
// bench/store_test.go measures the store on real captures of this host.
func BenchmarkGet(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "gpusnap.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 600)
	if err := s.Put(snap); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(snap.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPut stores a snapshot of 600 processes unchanged since the last.
func BenchmarkPut(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "gpusnap.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 600)
	t := time.Now()
	for b.Loop() {
		t = t.Add(time.Second)
		snap.ID = snapshot.NewID(t)
		if err := s.Put(snap); err != nil {
			b.Fatal(err)
		}
	}
}
