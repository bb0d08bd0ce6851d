// Package store keeps snapshots in one bbolt file, one top-level bucket per
// kind of record (docs/store.md has the layout). A process unchanged since an
// earlier snapshot is stored once, found by the SHA-256 of its JSON. Ids sort
// by time (snapshot.NewID), so every id-keyed bucket is in time order.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/gpusnap/gpusnap/store/tlog"
)

// SchemaVersion is the layout this gpusnap writes and reads. A file of a newer
// schema is refused rather than misread. Schema 2 is schema 1 with binary
// process records beside its JSON ones. A schema 1 file is read as it is,
// and its first read-write open marks it schema 2 (upgrade).
const SchemaVersion = 2

// DefaultLockTimeout is used when Options.LockTimeout is not positive, as
// bbolt's own default is to wait forever, which a Slurm epilog must never do.
const DefaultLockTimeout = 10 * time.Second

var (
	bucketInfo      = []byte("info")
	bucketMeta      = []byte("meta")
	bucketSnapshots = []byte("snapshots")
	bucketRefs      = []byte("refs")
	bucketProcs     = []byte("procs")
	bucketHashes    = []byte("hashes")
	bucketBaselines = []byte("baselines")

	allBuckets = [][]byte{bucketInfo, bucketMeta, bucketSnapshots, bucketRefs, bucketProcs, bucketHashes, bucketBaselines}
	keySchema  = []byte("schema")
)

// Options say how to open the store.
type Options struct {
	ReadOnly    bool          // readers open read-only and never block each other
	LockTimeout time.Duration // how long to wait for another gpusnap holding the file
}

// Filter selects snapshots in List. Zero fields match everything.
type Filter struct {
	Tenant string
	Label  string
	Since  time.Time
}

func (f Filter) match(m Meta) bool {
	return (f.Tenant == "" || m.Tenant == f.Tenant) &&
		(f.Label == "" || m.Label == f.Label) &&
		(f.Since.IsZero() || !m.Time.Before(f.Since))
}

// Meta describes a stored snapshot without loading it. The log's format
// defines it, since a leaf's digest covers it.
type Meta = tlog.Meta

// Errors callers tell apart with errors.Is.
var (
	// ErrNoBaseline is returned by LatestBaseline for a tenant with none.
	ErrNoBaseline = errors.New("no baseline")
	ErrNotFound   = errors.New("no such snapshot")
	ErrAmbiguous  = errors.New("ambiguous snapshot id")
	ErrExists     = errors.New("snapshot id already stored")
	ErrLocked     = errors.New("is locked by another gpusnap")
	ErrNoStore    = errors.New("no store")
	ErrDamaged    = errors.New("store is damaged")
	ErrNewer      = errors.New("was written by a newer gpusnap")
	ErrUnsafePath = errors.New("unsafe store path")
)

// DamagedError says the file is not a sound bbolt file. It matches ErrDamaged.
type DamagedError struct {
	Path  string
	Cause string
}

func (e *DamagedError) Error() string { return fmt.Sprintf("store %s is damaged: %s", e.Path, e.Cause) }

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// Store is an open store file.
type Store struct {
	db     *bolt.DB
	path   string
	fresh  bool // an empty bbolt file, not laid out yet
	schema int  // the file's schema version, as opened
}

// Open opens the store at path. Read-write, it creates the file (0600) and
// its directory (0700) when missing. Read-only, a missing file is an error.
// Running as root, a path other users could tamper with is refused.
func Open(path string, opts Options) (s *Store, err error) {
	if path == "" {
		return nil, errors.New("no store path given")
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	defer func(timeout time.Duration) {
		if errors.Is(err, ErrLocked) {
			err = fmt.Errorf("store %s %w (waited %s; see --lock-timeout)", path, ErrLocked, timeout)
		}
	}(opts.LockTimeout)
	if os.Geteuid() == 0 {
		if err := checkPath(path, 0); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		// bbolt would call it an invalid database, but it is no store at all.
		return nil, fmt.Errorf("store %s is a directory, not a store file", path)
	}
	if opts.ReadOnly {
		if fi, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Size() == 0) {
			return nil, fmt.Errorf("%w at %s (gpusnap snapshot or gpusnap baseline creates it)", ErrNoStore, path)
		}
		s, err = open(path, true, opts.LockTimeout)
		if err == nil && s.fresh {
			_ = s.Close()
			return nil, fmt.Errorf("%w at %s (the file holds no gpusnap data yet)", ErrNoStore, path)
		}
		return s, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the store's directory: %w", err)
	}
	// A read-write bbolt open loads the freelist and can fault or panic on a
	// damaged file with its lock and mmap held beyond reach. An existing file
	// is checked read-only first, so damage found there is reported without
	// a trace.
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		start := time.Now()
		pre, err := open(path, true, opts.LockTimeout)
		if err != nil {
			return nil, err
		}
		if err := pre.Close(); err != nil {
			return nil, err
		}
		opts.LockTimeout = max(opts.LockTimeout-time.Since(start), time.Millisecond)
	}
	s, err = open(path, false, opts.LockTimeout)
	if err == nil {
		if err = s.layout(); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, err
}

// open opens the bbolt file and checks it is a sound gpusnap store.
func open(path string, readOnly bool, timeout time.Duration) (s *Store, err error) {
	// bbolt panics on corrupt pages, also inside Open, with the file open and
	// locked. The file is kept so a panic can still close the descriptor. The
	// lock lives on with bbolt's mapping of the file until the process ends,
	// which is why Open checks a file read-only before opening it read-write.
	var file *os.File
	bopts := &bolt.Options{
		Timeout:  timeout,
		ReadOnly: readOnly,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, mode)
			file = f
			return f, err
		},
	}
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			s, err = nil, &DamagedError{Path: path, Cause: fmt.Sprint(r)}
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	db, err := bolt.Open(path, 0o600, bopts)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, ErrLocked
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch),
		// bbolt has no sentinel for a file cut short of its two meta pages.
		err != nil && strings.HasPrefix(err.Error(), "file size too small"):
		return nil, &DamagedError{Path: path, Cause: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s = &Store{db: db, path: path}
	if err := s.check(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// check checks the file's size, freelist and schema. An empty bbolt file is
// marked fresh.
func (s *Store) check() error {
	fileInfo, err := os.Stat(s.path)
	if err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		// A truncated file would fault when bbolt touches a page past its end.
		if fileInfo.Size() < tx.Size() {
			return &DamagedError{Path: s.path, Cause: fmt.Sprintf("truncated: %d bytes, its pages need %d", fileInfo.Size(), tx.Size())}
		}
		if err := s.checkFreelist(tx); err != nil {
			return err
		}
		info := tx.Bucket(bucketInfo)
		if info == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("%s is a bbolt file but not a gpusnap store", s.path)
			}
			s.fresh = true
			return nil
		}
		s.schema, err = checkSchema(s.path, info.Get(keySchema))
		return err
	})
}

// layout creates the buckets and schema of a new store, and upgrades an older
// one. Upgrading schema 1 only marks the file schema 2 and adds the types
// bucket, leaving its JSON records, hashes and log untouched. The mark makes
// an older gpusnap refuse the file rather than call its binary records
// damage.
func (s *Store) layout() error {
	if !s.fresh && s.schema == SchemaVersion {
		return nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		for _, name := range append(allBuckets, bucketTypes) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketInfo).Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
	})
	if err == nil {
		s.fresh, s.schema = false, SchemaVersion
	}
	return err
}

func checkSchema(path string, v []byte) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 {
		return 0, &DamagedError{Path: path, Cause: fmt.Sprintf("schema version %q is not a version", v)}
	}
	if n > SchemaVersion {
		return 0, fmt.Errorf("store %s %w (schema %d; this one reads up to %d): use a newer gpusnap", path, ErrNewer, n, SchemaVersion)
	}
	return n, nil
}

// Close releases the file and its lock.
func (s *Store) Close() error { return s.db.Close() }

// view and update run fn in a transaction and turn a bbolt panic (a corrupt
// page) into a DamagedError. bbolt rolls the transaction back on the way out,
// so a write that met damage leaves the file as it was.
func (s *Store) view(fn func(*bolt.Tx) error) (err error) {
	defer s.recoverDamage(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.db.View(fn)
}

func (s *Store) update(fn func(*bolt.Tx) error) (err error) {
	defer s.recoverDamage(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.db.Update(fn)
}

func (s *Store) recoverDamage(err *error) {
	if r := recover(); r != nil {
		*err = &DamagedError{Path: s.path, Cause: fmt.Sprint(r)}
	}
}

// damaged reports an inconsistency gpusnap found in its own records.
func (s *Store) damaged(format string, args ...any) error {
	return &DamagedError{Path: s.path, Cause: fmt.Sprintf(format, args...)}
}

// buckets fetches the store's buckets. A missing one means damage.
func (s *Store) buckets(tx *bolt.Tx, names ...[]byte) ([]*bolt.Bucket, error) {
	out := make([]*bolt.Bucket, len(names))
	for i, name := range names {
		if out[i] = tx.Bucket(name); out[i] == nil {
			return nil, s.damaged("bucket %s is missing", name)
		}
	}
	return out, nil
}
