package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/internal/safefile"
)

// VerifyDir checks an extracted bundle in dir, the bag's directory or the
// directory it was extracted into when that holds the bag's directory
// alone. The same bounds hold as for a tarball. A symlink, device or FIFO
// is a member of its type, never followed or read.
func VerifyDir(dir string, trusted ed25519.PublicKey) (*Verification, error) {
	root := dir
	if _, err := os.Lstat(filepath.Join(dir, FileBagIt)); err != nil {
		entries, rerr := os.ReadDir(dir)
		if rerr != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnreadable, rerr)
		}
		if len(entries) != 1 || !entries[0].IsDir() {
			return nil, fmt.Errorf("%w: %s holds no %s, nor one directory that does", ErrUnknownLayout, dir, FileBagIt)
		}
		root = filepath.Join(dir, entries[0].Name())
	}
	members, err := readDir(root)
	if err != nil {
		return nil, err
	}
	v := newVerifier(filepath.Base(root), members)
	return v.check(trusted, members), nil
}

// readDir hashes every file under root, keeping the tag files at its top.
func readDir(root string) ([]*member, error) {
	var members []*member
	total := int64(0)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if len(members) == maxEntries {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := &member{name: rel, typ: "other"}
		// The type as tar would archive it, so both paths name types alike.
		if hdr, err := tar.FileInfoHeader(info, ""); err == nil {
			m.typ = typeName(hdr.Typeflag)
		}
		if m.typ == "dir" {
			m.name += "/"
		}
		members = append(members, m)
		if m.typ != "file" {
			return nil
		}
		if info.Size() > maxEntrySize || total+info.Size() > maxTotal {
			return fmt.Errorf("%s: %d bytes, over the bounds of a bundle", rel, info.Size())
		}
		total += info.Size()
		keep := keepLimit(rel)
		if keep > 0 && !isTag(rel) && info.Size() > keep {
			keep = 0 // a snapshot too large to keep is hashed, and said unchecked
		}
		return hashFile(p, m, keep)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	return members, nil
}

// hashFile hashes the regular file p into m, keeping its bytes, at most
// keep of them, when keep is not 0.
func hashFile(p string, m *member, keep int64) error {
	f, err := safefile.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	var w io.Writer = h
	var kept bytes.Buffer
	limit := int64(maxEntrySize)
	if keep > 0 {
		w, limit = io.MultiWriter(h, &kept), keep
	}
	n, err := io.Copy(w, io.LimitReader(f, limit+1))
	if err != nil {
		return err
	}
	if n > limit {
		return fmt.Errorf("%s is over %d MiB", m.name, limit>>20)
	}
	m.size, m.sha256, m.data = n, hex.EncodeToString(h.Sum(nil)), kept.Bytes()
	return nil
}
