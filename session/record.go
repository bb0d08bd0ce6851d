package session

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/reap"
	"github.com/gpusnap/gpusnap/store"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// Record appends to the store's log a result leaf for r, of command, with
// its findings' SHA-256, the snapshots compared (ids) and the seals of the event
// log segments read (events, nil when none). It sets the log's new head in
// r. A result that could not be recorded is the error, said beside the
// verdict.
func (h *Host) Record(command string, r *diff.Result, events eventlog.Source, ids ...string) error {
	findings, err := json.Marshal(r.Findings)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(findings)
	var seals []tlog.EventSeal
	if events != nil {
		for _, s := range events.Meta().Heads {
			seals = append(seals, tlog.EventSeal{Segment: s.Segment, Line: s.Line, Seq: s.Seq, Hash: s.Hash})
		}
	}
	var head tlog.TreeHead
	err = h.use(true, func(st *store.Store) (err error) {
		head, err = st.AppendResult(command, hex.EncodeToString(sum[:]), seals, ids...)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s result not recorded in the store's log: %w", command, err)
	}
	r.StoreLog = LogHead(head)
	return nil
}

// RecordActions appends one leaf an action of reap to the store's log, with
// the step and result and the SHA-256 of the outcome's JSON, naming the
// snapshot judged. It returns what the log says of them, for reap's report.
func (h *Host) RecordActions(outcomes []reap.Outcome, judged string) (string, error) {
	var head tlog.TreeHead
	err := h.use(true, func(st *store.Store) error {
		for _, out := range outcomes {
			b, err := json.Marshal(out)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			if head, err = st.AppendResult("reap "+out.Action.Step+" "+out.Result, hex.EncodeToString(sum[:]), nil, judged); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d actions recorded in the store's log (size %d)", len(outcomes), head.Size), nil
}

// LogHead is a head of the store's log as results and baselines carry it.
func LogHead(head tlog.TreeHead) *diff.LogHead {
	return &diff.LogHead{Origin: head.Origin, Size: head.Size, Root: base64.StdEncoding.EncodeToString(head.Root)}
}

// Checkpoint is the head of the store's log and its checkpoint, a signed
// note with a key, or its body and the blank line alone without.
type Checkpoint struct {
	tlog.TreeHead
	Checkpoint string `json:"checkpoint"`
}

// Checkpoint reads the store's log head and signs it with key.
func (h *Host) Checkpoint(key ed25519.PrivateKey) (Checkpoint, error) {
	var head tlog.TreeHead
	err := h.read(func(st *store.Store) (err error) {
		head, err = st.Head()
		return err
	})
	if err != nil {
		return Checkpoint{}, err
	}
	note, err := checkpointText(head, key)
	return Checkpoint{head, string(note)}, err
}

// checkpointText is head as a checkpoint, a signed note with key, or its
// body and the blank line alone without.
func checkpointText(head tlog.TreeHead, key ed25519.PrivateKey) ([]byte, error) {
	if key == nil {
		return append(tlog.CheckpointBody(head), '\n'), nil
	}
	return tlog.SignCheckpoint(head, key)
}

// LogProof is what store verify proves, the report and whether the
// checkpoint's signature was checked against a key.
type LogProof struct {
	*store.LogReport
	CheckpointVerified bool
}

// VerifyLog proves the store against its log and, when name is not empty,
// against the earlier checkpoint read from it, text, signed by pub when pub
// is not nil. Seals of event log segments no longer held are problems too
// (checkSeals).
func (h *Host) VerifyLog(name string, text []byte, pub ed25519.PublicKey, now time.Time) (LogProof, error) {
	var proof LogProof
	var cp *tlog.TreeHead
	if name != "" {
		head, ok, err := tlog.ParseCheckpoint(text, pub)
		if err != nil {
			return proof, fmt.Errorf("%s: %w", name, err)
		}
		cp, proof.CheckpointVerified = &head, ok
	}
	err := h.read(func(st *store.Store) (err error) {
		proof.LogReport, err = st.VerifyLog(cp)
		return err
	})
	if err != nil {
		return proof, err
	}
	h.checkSeals(proof.LogReport, now)
	return proof, nil
}

// maxSealProblems bounds the problems the event log's seals add to a
// verify, since one removed segment is named by every result that sealed it.
const maxSealProblems = 64

// checkSeals adds to rep a problem for each seal in the result leaves that
// the event log no longer holds (a segment rewritten, cut back or removed). A
// removed segment that started more than watch's default retention before now
// counts as pruned, because retention and deletion look alike from then on.
func (h *Host) checkSeals(rep *store.LogReport, now time.Time) {
	if len(rep.Seals) == 0 {
		return
	}
	heads := make([]eventlog.Head, len(rep.Seals))
	for i, s := range rep.Seals {
		heads[i] = eventlog.Head{Segment: s.Segment, Line: s.Line, Seq: s.Seq, Hash: s.Hash}
	}
	added := 0
	for i, err := range eventlog.CheckHeads(eventlog.JournalDir(h.DB), heads) {
		if err == nil || added == maxSealProblems {
			continue
		}
		if errors.Is(err, eventlog.ErrSegmentGone) {
			if start, ok := eventlog.SegmentStart(heads[i].Segment); ok && start.Before(now.Add(-h.Retain)) {
				continue
			}
			err = fmt.Errorf("%w: removed from the event log after this result read it", err)
		}
		added++
		rep.Problems = append(rep.Problems, store.LogProblem{Leaf: int64(rep.Seals[i].Leaf), Detail: "the event log this result read: " + err.Error()})
	}
}
