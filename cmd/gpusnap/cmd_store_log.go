package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/store/tlog"
	"github.com/gpusnap/gpusnap/watch"
)

func storeCheckpointCommand() *cli.Command {
	return &cli.Command{
		Name:  "checkpoint",
		Usage: "print a signed checkpoint of the store's log",
		UsageText: "gpusnap store checkpoint --sign-key KEY\n\nPrints the log's origin (gpusnap/<host>), size and root hash as a C2SP signed note,\n" +
			"signed with the ed25519 KEY. Keep it off this host: gpusnap store verify --checkpoint\n" +
			"then proves the store still holds every leaf it had.\n\n" +
			"Examples:\n  gpusnap store checkpoint --sign-key /etc/gpusnap/bundle.key | ssh archive 'cat > cp/$(hostname)-$(date +%s)'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "sign-key", Usage: "sign with the ed25519 private `KEY` (from gpusnap keygen; required)"},
		},
		Action: action(parseStoreCheckpoint, runStoreCheckpoint),
	}
}

// storeCheckpointOptions: the key to sign with.
type storeCheckpointOptions struct{ SignKey string }

func parseStoreCheckpoint(c *cli.Context) (storeCheckpointOptions, error) {
	if c.String("sign-key") == "" {
		// An unsigned checkpoint proves nothing to whoever keeps it.
		return storeCheckpointOptions{}, usageError(errors.New("store checkpoint needs --sign-key KEY"))
	}
	return storeCheckpointOptions{SignKey: c.String("sign-key")}, nil
}

func runStoreCheckpoint(_ context.Context, g globals, o storeCheckpointOptions) error {
	key, err := bundle.ReadPrivateKey(o.SignKey)
	if err != nil {
		return err
	}
	var head tlog.TreeHead
	if err := readStore(g, func(st *store.Store) error {
		head, err = st.Head()
		return err
	}); err != nil {
		return err
	}
	note, err := checkpointText(head, key)
	if err != nil {
		return err
	}
	if g.JSON {
		return render.JSON(g.Stdout, struct {
			tlog.TreeHead
			Checkpoint string `json:"checkpoint"`
		}{head, string(note)})
	}
	_, err = g.Stdout.Write(note)
	return err
}

func storeVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "prove the store is what its log says, and consistent with an earlier checkpoint",
		UsageText: "gpusnap store verify [--checkpoint FILE [--pub KEY]] [--json]\n\n" +
			"Recomputes the log's tree from its leaves and checks every stored snapshot against the leaf that\n" +
			"stored it. With --checkpoint, the log must extend that checkpoint (a store cut back or replaced\n" +
			"fails); with --pub, the checkpoint's signature must be that key's. Exit status: 0 consistent,\n" +
			"1 something removed, changed, added or reordered (named by leaf and snapshot id), 2 error.\n\n" +
			"Examples:\n  gpusnap store verify\n  gpusnap store verify --checkpoint cp-1767225600 --pub bundle.pub --json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "an earlier checkpoint `FILE` (from gpusnap store checkpoint)"},
			&cli.StringFlag{Name: "pub", Usage: "the public `KEY` the checkpoint must be signed with"},
		},
		Action: action(parseStoreVerify, runStoreVerify),
	}
}

// storeVerifyOptions: the checkpoint to prove against and its key.
type storeVerifyOptions struct{ Checkpoint, Pub string }

func parseStoreVerify(c *cli.Context) (storeVerifyOptions, error) {
	o := storeVerifyOptions{Checkpoint: c.String("checkpoint"), Pub: c.String("pub")}
	if o.Pub != "" && o.Checkpoint == "" {
		return o, usageError(errors.New("--pub checks a checkpoint's signature: give --checkpoint FILE too"))
	}
	return o, nil
}

// maxCheckpoint bounds a checkpoint file: three lines and a few signatures.
const maxCheckpoint = 64 << 10

func runStoreVerify(_ context.Context, g globals, o storeVerifyOptions) error {
	var cp *tlog.TreeHead
	verified := false
	if o.Checkpoint != "" {
		var pub ed25519.PublicKey
		var err error
		if o.Pub != "" {
			if pub, err = bundle.ReadPublicKey(o.Pub); err != nil {
				return err
			}
		}
		text, err := safefile.ReadFile(o.Checkpoint, maxCheckpoint)
		if err != nil {
			return err
		}
		head, ok, err := tlog.ParseCheckpoint(text, pub)
		if err != nil {
			return fmt.Errorf("%s: %w", o.Checkpoint, err)
		}
		cp, verified = &head, ok
	}
	var rep *store.LogReport
	if err := readStore(g, func(st *store.Store) (err error) {
		rep, err = st.VerifyLog(cp)
		return err
	}); err != nil {
		return err
	}
	checkSeals(g, rep, time.Now())
	if g.JSON {
		if err := render.JSON(g.Stdout, struct {
			Path               string `json:"path"`
			OK                 bool   `json:"ok"`
			CheckpointVerified bool   `json:"checkpoint_signature_verified"`
			*store.LogReport
		}{g.DB, len(rep.Problems) == 0, verified, rep}); err != nil {
			return err
		}
	} else {
		printStoreVerify(g, rep, o.Checkpoint, verified)
	}
	if len(rep.Problems) > 0 {
		return statusError{exitFindings}
	}
	return nil
}

// maxSealProblems bounds the problems the event log's seals add to a
// verify: one removed segment is named by every result that sealed it.
const maxSealProblems = 64

// checkSeals adds to rep a problem for each seal in the result leaves that
// the event log no longer holds (a segment rewritten, cut back or removed). A
// removed segment that started more than watch's default retention before now
// counts as pruned, because retention and deletion look alike from then on.
func checkSeals(g globals, rep *store.LogReport, now time.Time) {
	if len(rep.Seals) == 0 {
		return
	}
	heads := make([]eventlog.Head, len(rep.Seals))
	for i, s := range rep.Seals {
		heads[i] = eventlog.Head{Segment: s.Segment, Line: s.Line, Seq: s.Seq, Hash: s.Hash}
	}
	added := 0
	for i, err := range eventlog.CheckHeads(eventlog.JournalDir(g.DB), heads) {
		if err == nil || added == maxSealProblems {
			continue
		}
		if errors.Is(err, eventlog.ErrSegmentGone) {
			if start, ok := eventlog.SegmentStart(heads[i].Segment); ok && start.Before(now.Add(-watch.DefaultRetain)) {
				continue
			}
			err = fmt.Errorf("%w: removed from the event log after this result read it", err)
		}
		added++
		rep.Problems = append(rep.Problems, store.LogProblem{Leaf: int64(rep.Seals[i].Leaf), Detail: "the event log this result read: " + err.Error()})
	}
}

func printStoreVerify(g globals, rep *store.LogReport, checkpoint string, verified bool) {
	for _, p := range rep.Problems {
		leaf := "-"
		if p.Leaf >= 0 {
			leaf = fmt.Sprint(p.Leaf)
		}
		// Ids and details come from a store anyone could have crafted.
		fmt.Fprintf(g.Stdout, "leaf %s: %s\n", leaf, safetext.Line(p.Detail))
	}
	h := rep.Head
	fmt.Fprintf(g.Stdout, "log %s: %d leaves, root %s, %d snapshots\n", safetext.Escape(h.Origin), h.Size, base64.StdEncoding.EncodeToString(h.Root), rep.Snapshots)
	if cp := rep.Checkpoint; cp != nil {
		sig := "signature verified"
		if !verified {
			sig = "signature NOT checked (no --pub)"
		}
		fmt.Fprintf(g.Stdout, "checkpoint %s: %d leaves, %s\n", safetext.Escape(checkpoint), cp.Size, sig)
	}
	if len(rep.Problems) == 0 {
		fmt.Fprintf(g.Stdout, "store %s is consistent with its log\n", g.DB)
	} else {
		fmt.Fprintf(g.Stdout, "store %s is NOT consistent with its log (problems: %d)\n", g.DB, len(rep.Problems))
	}
}

// recordResult appends to the store's log a result leaf for r: its findings'
// SHA-256, the snapshots compared and the seals of the event log segments
// read. It sets the log's new head in r and run, for the JSON and the
// textfile. A result that could not be recorded is the error, reported beside
// the verdict.
func recordResult(g globals, command string, r *diff.Result, run *metrics.Run, events eventlog.Source, ids ...string) error {
	findings, err := json.Marshal(r.Findings)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(findings)
	st, err := openStore(g, false)
	if err != nil {
		return fmt.Errorf("%s result not recorded in the store's log: %w", command, err)
	}
	var seals []tlog.EventSeal
	if events != nil {
		for _, h := range events.Meta().Heads {
			seals = append(seals, tlog.EventSeal{Segment: h.Segment, Line: h.Line, Seq: h.Seq, Hash: h.Hash})
		}
	}
	head, err := st.AppendResult(command, hex.EncodeToString(sum[:]), seals, ids...)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s result not recorded in the store's log: %w", command, err)
	}
	r.StoreLog = &diff.LogHead{Origin: head.Origin, Size: head.Size, Root: base64.StdEncoding.EncodeToString(head.Root)}
	run.StoreLog = r.StoreLog
	return nil
}

// checkpointText is head as a checkpoint: a signed note with key, its body
// and the blank line alone without.
func checkpointText(head tlog.TreeHead, key ed25519.PrivateKey) ([]byte, error) {
	if key == nil {
		return append(tlog.CheckpointBody(head), '\n'), nil
	}
	return tlog.SignCheckpoint(head, key)
}
