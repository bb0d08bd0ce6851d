// Package store keeps snapshots in one bbolt file.
package store

import (
	"errors"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Options say how to open the store.
type Options struct {
	ReadOnly    bool          // readers open read-only and never block each other
	LockTimeout time.Duration // how long to wait for another gpusnap holding the file
}

// Filter selects snapshots in List; zero fields match everything.
type Filter struct {
	Tenant string
	Label  string
	Since  time.Time
}

// Meta describes a stored snapshot without loading it.
type Meta struct {
	ID     string    `json:"id"`
	Label  string    `json:"label"`
	Tenant string    `json:"tenant"`
	Host   string    `json:"host"`
	Time   time.Time `json:"time"`
}

// ErrNoBaseline is returned by LatestBaseline for a tenant with none.
var ErrNoBaseline = errors.New("no baseline")

// Store is an open store file.
// TODO(store issue): bbolt.
type Store struct{}

// Open opens (creating when not read-only) the store at path.
func Open(path string, opts Options) (*Store, error) { return nil, errors.New("store: not implemented yet") }

// Close releases the file and its lock.
func (s *Store) Close() error { return nil }

// Put stores a snapshot under its ID.
func (s *Store) Put(snap *snapshot.Snapshot) error { return errors.New("not implemented") }

// Get loads a snapshot by its full id or any unique prefix.
func (s *Store) Get(idOrPrefix string) (*snapshot.Snapshot, error) {
	return nil, errors.New("not implemented")
}

// LatestBaseline loads the newest baseline of tenant, or ErrNoBaseline.
func (s *Store) LatestBaseline(tenant string) (*snapshot.Snapshot, error) {
	return nil, ErrNoBaseline
}

// List describes the stored snapshots that match f, newest first.
func (s *Store) List(f Filter) ([]Meta, error) { return nil, errors.New("not implemented") }
