package tlog

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	tdlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// A checkpoint is a C2SP signed note (c2sp.org/tlog-checkpoint). It holds
// the origin, the tree size and the base64 root hash, one line each, then a
// blank line and the signature lines. The key's name in the note is the
// log's origin, and its ed25519 key is --sign-key's.

// algEd25519 is the signed-note algorithm byte of an ed25519 key.
const algEd25519 = 1

// SignCheckpoint writes head as a checkpoint signed with key.
func SignCheckpoint(head TreeHead, key ed25519.PrivateKey) ([]byte, error) {
	pub := key.Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(head.Origin, pub)
	if err != nil {
		return nil, err
	}
	// The signer key is the verifier key's name and hash with the seed in
	// place of the public key (note.GenerateKey's format).
	_, hash, _ := cutKey(vkey)
	skey := fmt.Sprintf("PRIVATE+KEY+%s+%s+%s", head.Origin, hash,
		base64.StdEncoding.EncodeToString(append([]byte{algEd25519}, key.Seed()...)))
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	return note.Sign(&note.Note{Text: string(CheckpointBody(head))}, signer)
}

// CheckpointBody is head's checkpoint text, without signatures.
func CheckpointBody(head TreeHead) []byte {
	return tdlog.Checkpoint{Origin: head.Origin, Size: head.Size, Hash: head.Root}.Marshal()
}

// cutKey splits a verifier key into its name, hash and key. A name holds
// no '+', though the base64 key may.
func cutKey(vkey string) (name, hash, key string) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return vkey, "", ""
	}
	return parts[0], parts[1], parts[2]
}

// ErrCheckpointSignature says a checkpoint is not signed by the key given.
var ErrCheckpointSignature = errors.New("checkpoint signature does not verify")

// ParseCheckpoint reads a checkpoint. With pub, it must carry a valid
// signature of that key under the checkpoint's origin. Without pub, its
// signature is not checked and verified is false.
func ParseCheckpoint(text []byte, pub ed25519.PublicKey) (head TreeHead, verified bool, err error) {
	body, _, ok := bytes.Cut(text, []byte("\n\n"))
	if !ok {
		return head, false, errors.New("not a signed note: no blank line before its signatures")
	}
	var cp tdlog.Checkpoint
	if _, err := cp.Unmarshal(append(body, '\n')); err != nil {
		return head, false, err
	}
	head = TreeHead{Origin: cp.Origin, Size: cp.Size, Root: cp.Hash}
	if len(cp.Hash) != Hasher.Size() {
		return head, false, fmt.Errorf("checkpoint root of %d bytes, want %d", len(cp.Hash), Hasher.Size())
	}
	if pub == nil {
		return head, false, nil
	}
	vkey, err := note.NewEd25519VerifierKey(cp.Origin, pub)
	if err != nil {
		return head, false, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return head, false, fmt.Errorf("checkpoint origin %q: %w", cp.Origin, err)
	}
	if _, err := note.Open(text, note.VerifierList(v)); err != nil {
		return head, false, fmt.Errorf("%w: %v", ErrCheckpointSignature, err)
	}
	return head, true, nil
}
