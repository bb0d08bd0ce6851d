package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/reap"
	"github.com/gpusnap/gpusnap/session"
)

// evidenceBundle readies the bundle of j under the evidence directory, its
// store proofs gathered in host's hold of the store that judged it, and
// returns the directory and the bundle.
func (o reapOptions) evidenceBundle(g globals, host *session.Host, j *judgement) (string, session.Bundle, error) {
	dir := o.Evidence
	if dir == "" {
		dir = filepath.Join(filepath.Dir(g.DB), "reap", j.To.ID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", session.Bundle{}, fmt.Errorf("evidence: %w", err)
	}
	path := filepath.Join(dir, "bundle.tar.gz")
	var bo bundleOpts
	if err := bo.readFiles(path, false, o.SignKey); err != nil {
		return "", session.Bundle{}, err
	}
	b := bo.bundle(path)
	host.Prove(&b, j.From, j.To)
	return dir, b, nil
}

// keepEvidence writes and verifies the bundle of j that evidenceBundle
// readied, since an action follows only evidence that reads back intact.
func keepEvidence(ctx context.Context, host *session.Host, dir string, b session.Bundle, j *judgement) (*session.Evidence, error) {
	r := j.Result
	if j.Result.Check == nil {
		// The bundle holds every involved process's maps diff.
		opts := j.Window
		opts.MapsDiff = true
		r = diff.Compare(j.From, j.To, opts)
	}
	return host.KeepEvidence(ctx, dir, b, j.From, j.To, r, j.Window)
}

// recordActions appends to the store's log one leaf an action, naming the
// snapshot judged, and says in ev's Log what the log holds of them.
func recordActions(g globals, host *session.Host, ev *session.Evidence, outcomes []reap.Outcome, j *judgement) {
	log, err := host.RecordActions(outcomes, j.To.ID)
	if err != nil {
		ev.Log = "the actions are not in the store's log: " + err.Error()
		warn(g, errors.New(ev.Log))
		return
	}
	ev.Log = log
}
