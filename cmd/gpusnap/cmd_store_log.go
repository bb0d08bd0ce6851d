package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
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

// storeCheckpointOptions name the key to sign with.
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
	cp, err := g.host().Checkpoint(key)
	if err != nil {
		return err
	}
	if g.JSON {
		return render.JSON(g.Stdout, cp)
	}
	_, err = io.WriteString(g.Stdout, cp.Checkpoint)
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

// storeVerifyOptions name the checkpoint to prove against and its key.
type storeVerifyOptions struct{ Checkpoint, Pub string }

func parseStoreVerify(c *cli.Context) (storeVerifyOptions, error) {
	o := storeVerifyOptions{Checkpoint: c.String("checkpoint"), Pub: c.String("pub")}
	if o.Pub != "" && o.Checkpoint == "" {
		return o, usageError(errors.New("--pub checks a checkpoint's signature: give --checkpoint FILE too"))
	}
	return o, nil
}

// maxCheckpoint bounds a checkpoint file, which is three lines and a few
// signatures.
const maxCheckpoint = 64 << 10

func runStoreVerify(_ context.Context, g globals, o storeVerifyOptions) error {
	var pub ed25519.PublicKey
	var text []byte
	if o.Checkpoint != "" {
		var err error
		if o.Pub != "" {
			if pub, err = bundle.ReadPublicKey(o.Pub); err != nil {
				return err
			}
		}
		if text, err = safefile.ReadFile(o.Checkpoint, maxCheckpoint); err != nil {
			return err
		}
	}
	proof, err := g.host().VerifyLog(o.Checkpoint, text, pub, time.Now())
	if err != nil {
		return err
	}
	rep, verified := proof.LogReport, proof.CheckpointVerified
	if g.JSON {
		if err := render.JSON(g.Stdout, struct {
			Path               string `json:"path"`
			OK                 bool   `json:"ok"`
			CheckpointVerified bool   `json:"checkpoint_signature_verified"`
			*session.LogReport
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

func printStoreVerify(g globals, rep *session.LogReport, checkpoint string, verified bool) {
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
