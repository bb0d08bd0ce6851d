package session

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/reap"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// Bundle is a bundle to write, with where, whether over a file there, the
// key that signs it and the tenant's job's times for its time line. Prove fills
// in the store's evidence, or WriteBundle does.
type Bundle struct {
	Path                   string
	Force                  bool
	SignKey                ed25519.PrivateKey
	TenantStart, TenantEnd time.Time

	proved   bool
	store    *bundle.StoreEvidence
	storeErr error
}

// Written describes a bundle just written, for the line or JSON that says so.
type Written struct {
	File    string       `json:"file"`
	SHA256  string       `json:"sha256"`
	Bag     string       `json:"bag"` // the tarball's one directory
	From    string       `json:"from"`
	To      string       `json:"to"`
	Tenant  string       `json:"tenant,omitempty"`
	Files   int          `json:"files"`
	Summary diff.Summary `json:"summary"`
	Signer  string       `json:"signer,omitempty"` // the signing key, base64
	// StoreProved says the bundle carries the store log's checkpoint and
	// the inclusion of its stored snapshots.
	StoreProved bool `json:"store_proved"`
}

func (w Written) String() string {
	signed := "unsigned"
	if w.Signer != "" {
		signed = "signed by " + w.Signer
	}
	return fmt.Sprintf("wrote %s: %s to %s, findings: %d, %s, sha256 %s",
		safetext.Escape(w.File), safetext.Escape(w.From), safetext.Escape(w.To), w.Summary.Total, signed, w.SHA256)
}

// Prove gathers b's store evidence for the pair from..to now, in the hold
// that judged it, so the bundle can be written after the hold is released.
func (h *Host) Prove(b *Bundle, from, to *snapshot.Snapshot) {
	b.store, b.storeErr = h.storeEvidence(b.SignKey, from.ID, to.ID)
	b.proved = true
}

// WriteBundle writes the bundle of the pair from..to judged as res, with
// what window read of the time between them (the kernel log and the
// watch's events). A bundle whose store evidence could not be gathered goes
// out without it, and a warning says so.
func (h *Host) WriteBundle(ctx context.Context, b Bundle, from, to *snapshot.Snapshot, res *diff.Result, window diff.Options) (Written, error) {
	if !b.proved {
		h.Prove(&b, from, to)
	}
	if b.storeErr != nil {
		h.warnErr(fmt.Errorf("bundle: the store's log is not in the bundle: %w", b.storeErr))
	}
	in := bundle.Input{
		Before: from, After: to, Result: res, KernelLog: window.KernelLog, Events: window.Events,
		Version: h.Version, UID: os.Getuid(),
		TenantStart: b.TenantStart, TenantEnd: b.TenantEnd,
		SignKey: b.SignKey, Store: b.store,
	}
	m, err := bundle.WriteFile(ctx, b.Path, in, b.Force)
	if err != nil {
		return Written{}, fmt.Errorf("bundle: %w", err)
	}
	sum, err := fileSHA256(b.Path)
	if err != nil {
		return Written{}, fmt.Errorf("bundle: %w", err)
	}
	p := m.Predicate
	w := Written{File: b.Path, SHA256: sum, Bag: m.Bag, From: from.ID, To: to.ID, Tenant: p.Tenant, Files: m.Files, Summary: res.Summary, StoreProved: p.Store != nil}
	if p.Signer != nil {
		w.Signer = p.Signer.PublicKey
	}
	return w, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// storeEvidence proves the bundle's snapshots in the store's log with the
// log's checkpoint (signed with key, when given) and each stored snapshot's
// inclusion at it. A snapshot not stored (a TO captured for the bundle) is
// named as such.
func (h *Host) storeEvidence(key ed25519.PrivateKey, ids ...string) (*bundle.StoreEvidence, error) {
	ev := &bundle.StoreEvidence{}
	var head tlog.TreeHead
	err := h.read(func(st *store.Store) error {
		var err error
		if head, err = st.Head(); err != nil {
			return err
		}
		for _, id := range ids {
			p, err := st.Inclusion(id)
			switch {
			case err != nil && !store.IsNotInLog(err):
				return err
			case err != nil:
				ev.NotStored = append(ev.NotStored, id)
			default:
				ev.Inclusion = append(ev.Inclusion, p...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ev.Inclusion) > 0 {
		head = ev.Inclusion[0].Head // the proofs' head, as a write since Head is not in them
	}
	note, err := checkpointText(head, key)
	if err != nil {
		return nil, err
	}
	ev.Checkpoint = string(note)
	return ev, nil
}

// Evidence is what reap keeps before it acts, the bundle of the
// judgement, verified, and the memory of each suspected compromise.
type Evidence struct {
	Dir      string        `json:"dir"`
	Bundle   Written       `json:"bundle"`
	Verified bool          `json:"verified"`
	Memory   []reap.Memory `json:"memory,omitempty"`
	// Log is the store's log after the leaves of the actions, or why
	// they are not in it.
	Log string `json:"log"`
}

func (e *Evidence) String() string {
	return fmt.Sprintf("%s, verified intact; %s", e.Bundle, e.Log)
}

// KeepEvidence writes b, the bundle of a judgement, in the evidence
// directory dir and verifies it, since an action follows only evidence
// that reads back intact.
func (h *Host) KeepEvidence(ctx context.Context, dir string, b Bundle, from, to *snapshot.Snapshot, res *diff.Result, window diff.Options) (*Evidence, error) {
	w, err := h.WriteBundle(ctx, b, from, to, res, window)
	if err != nil {
		return nil, err
	}
	var trusted ed25519.PublicKey
	if b.SignKey != nil {
		trusted = b.SignKey.Public().(ed25519.PublicKey)
	}
	f, err := os.Open(b.Path)
	if err != nil {
		return nil, fmt.Errorf("evidence %s: %w", b.Path, err)
	}
	defer f.Close()
	v, err := bundle.Verify(f, trusted)
	if err != nil {
		return nil, fmt.Errorf("evidence %s: %w", b.Path, err)
	}
	if !v.Intact() {
		return nil, fmt.Errorf("evidence %s does not verify: %d problems", b.Path, len(v.Problems))
	}
	return &Evidence{Dir: dir, Bundle: w, Verified: true}, nil
}

// KeepMemory keeps a target's memory, up to limit bytes, under the
// evidence directory, for reap's actor.
func (e *Evidence) KeepMemory(limit uint64) func(t reap.Target) (string, error) {
	return func(t reap.Target) (string, error) {
		m, err := reap.KeepMemory(e.Dir, int64(min(limit, 1<<62)), t)
		if err != nil {
			return "", err
		}
		e.Memory = append(e.Memory, m)
		return m.String(), nil
	}
}
