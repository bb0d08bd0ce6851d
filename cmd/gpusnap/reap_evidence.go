package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/reap"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// reapEvidence is what reap keeps before it acts: the bundle of the
// judgement, verified, and the memory of each suspected compromise.
type reapEvidence struct {
	Dir      string        `json:"dir"`
	Bundle   written       `json:"bundle"`
	Verified bool          `json:"verified"`
	Memory   []reap.Memory `json:"memory,omitempty"`
	// Log is the store's log after the leaves of the actions, or why
	// they are not in it.
	Log string `json:"log"`
}

func (e *reapEvidence) String() string {
	return fmt.Sprintf("%s, verified intact; %s", e.Bundle, e.Log)
}

// writeEvidence writes the bundle of j under the evidence directory and
// verifies it: an action follows only evidence that reads back intact.
func (o reapOptions) writeEvidence(ctx context.Context, g globals, j *judgement) (*reapEvidence, error) {
	dir := o.Evidence
	if dir == "" {
		dir = filepath.Join(filepath.Dir(g.DB), "reap", j.To.ID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("evidence: %w", err)
	}
	path := filepath.Join(dir, "bundle.tar.gz")
	var bo bundleOpts
	if err := bo.readFiles(path, false, o.SignKey); err != nil {
		return nil, err
	}
	r := j.Result
	if j.Result.Check == nil {
		// The bundle holds every involved process's maps diff.
		opts := j.Window
		opts.MapsDiff = true
		r = diff.Compare(j.From, j.To, opts)
	}
	w, err := writeBundle(ctx, g, path, bo, j.From, j.To, r, j.Window)
	if err != nil {
		return nil, err
	}
	var trusted ed25519.PublicKey
	if bo.signKey != nil {
		trusted = ed25519.PrivateKey(bo.signKey).Public().(ed25519.PublicKey)
	}
	v, err := verifyBundle(path, trusted)
	if err != nil {
		return nil, fmt.Errorf("evidence %s: %w", path, err)
	}
	if !v.Intact() {
		return nil, fmt.Errorf("evidence %s does not verify: %d problems", path, len(v.Problems))
	}
	return &reapEvidence{Dir: dir, Bundle: w, Verified: true}, nil
}

// keepMemory keeps a target's memory under the evidence directory.
func (e *reapEvidence) keepMemory(limit uint64) func(t reap.Target) (string, error) {
	return func(t reap.Target) (string, error) {
		m, err := reap.KeepMemory(e.Dir, int64(min(limit, 1<<62)), t)
		if err != nil {
			return "", err
		}
		e.Memory = append(e.Memory, m)
		return m.String(), nil
	}
}

// record appends one leaf a action to the store's log: the step, and the
// SHA-256 of the outcome's JSON, naming the snapshot judged.
func (e *reapEvidence) record(g globals, outcomes []reap.Outcome, j *judgement) {
	err := func() error {
		st, err := openStore(g, false)
		if err != nil {
			return err
		}
		var head tlog.TreeHead
		for _, out := range outcomes {
			b, err := json.Marshal(out)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			if head, err = st.AppendResult("reap "+out.Action.Step+" "+out.Result, hex.EncodeToString(sum[:]), nil, j.To.ID); err != nil {
				return errors.Join(err, st.Close())
			}
		}
		if err := st.Close(); err != nil {
			return err
		}
		e.Log = fmt.Sprintf("%d actions recorded in the store's log (size %d)", len(outcomes), head.Size)
		return nil
	}()
	if err != nil {
		e.Log = "the actions are not in the store's log: " + err.Error()
		warn(g, errors.New(e.Log))
	}
}
