package bundle

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	ita "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// The bundle's statement is an in-toto Statement v1 whose subjects are the
// payload files (data/...) with their SHA-256 and whose predicate is the
// Predicate below. Signed, it is the payload of a DSSE envelope
// (statement.dsse.json) with one ed25519 signature. Unsigned, it is
// statement.intoto.json itself.

// PredicateType names the predicate, which docs/bundle.md describes.
const PredicateType = "https://github.com/gpusnap/gpusnap/blob/main/docs/bundle.md#predicate-v1"

// PayloadType is the DSSE payload type of an in-toto statement.
const PayloadType = "application/vnd.in-toto+json"

// KeyID names a public key as the envelope does, by the hex SHA-256 of its
// 32 raw bytes (`openssl pkey -pubin -outform DER | tail -c 32 | sha256sum`).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

// edSigner signs and verifies DSSE's pre-authentication encoding with one
// ed25519 key, for go-securesystemslib's envelope signer and verifier.
type edSigner struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func (s edSigner) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(s.priv, data), nil
}

func (s edSigner) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(s.pub, data, sig) {
		return errors.New("ed25519: signature does not verify")
	}
	return nil
}

func (s edSigner) KeyID() (string, error)   { return KeyID(s.pub), nil }
func (s edSigner) Public() crypto.PublicKey { return s.pub }

// statementJSON builds the statement of payload and pred, checks it with
// the in-toto types' own validation, and writes it as compact JSON with
// sorted keys. protojson's output is deliberately not stable, and the same
// bundle must give the same bytes.
func statementJSON(payload map[string][]byte, pred *Predicate) ([]byte, error) {
	pj, err := json.Marshal(pred)
	if err != nil {
		return nil, err
	}
	ps := &structpb.Struct{}
	if err := protojson.Unmarshal(pj, ps); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(payload))
	for name := range payload {
		names = append(names, name)
	}
	sort.Strings(names)
	st := &ita.Statement{Type: ita.StatementTypeUri, PredicateType: PredicateType, Predicate: ps}
	for _, name := range names {
		st.Subject = append(st.Subject, &ita.ResourceDescriptor{Name: name, Digest: map[string]string{"sha256": sha256Hex(payload[name])}})
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("bundle: statement: %w", err)
	}
	b, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	var canon any
	if err := json.Unmarshal(b, &canon); err != nil {
		return nil, err
	}
	return json.Marshal(canon)
}

// envelopeJSON signs statement into a DSSE envelope.
func envelopeJSON(statement []byte, key ed25519.PrivateKey) ([]byte, error) {
	es, err := dsse.NewEnvelopeSigner(edSigner{priv: key, pub: key.Public().(ed25519.PublicKey)})
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(context.Background(), PayloadType, statement)
	if err != nil {
		return nil, err
	}
	return marshal(env)
}

// maxStatement bounds the statement and envelope verify reads.
const maxStatement = 16 << 20

// openEnvelope parses a DSSE envelope and checks its signature with pub.
// It returns the statement the envelope carries even when the signature
// fails, so the rest can still be checked and reported.
func openEnvelope(b []byte, pub ed25519.PublicKey) (statement []byte, sigErr, err error) {
	var env dsse.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, nil, fmt.Errorf("not a DSSE envelope: %v", err)
	}
	if env.PayloadType != PayloadType {
		return nil, nil, fmt.Errorf("payload type %q, want %q", env.PayloadType, PayloadType)
	}
	statement, err = base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, nil, fmt.Errorf("payload is not base64: %v", err)
	}
	if pub == nil {
		return statement, errors.New("the statement names no signer key"), nil
	}
	ev, err := dsse.NewEnvelopeVerifier(edSigner{pub: pub})
	if err != nil {
		return nil, nil, err
	}
	if _, err := ev.Verify(context.Background(), &env); err != nil {
		return statement, err, nil
	}
	if len(env.Signatures) != 1 {
		return statement, fmt.Errorf("%d signatures, want 1", len(env.Signatures)), nil
	}
	return statement, nil, nil
}

// parseStatement reads a statement with the in-toto types, validates it,
// and returns its subjects (name -> hex SHA-256) and predicate.
func parseStatement(b []byte) (map[string]string, *Predicate, error) {
	var st ita.Statement
	if err := protojson.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("not an in-toto statement: %v", err)
	}
	if err := st.Validate(); err != nil {
		return nil, nil, fmt.Errorf("not a valid in-toto statement v1: %v", err)
	}
	if st.GetType() != ita.StatementTypeUri || st.GetPredicateType() != PredicateType {
		return nil, nil, fmt.Errorf("statement %s with predicate %s, want %s with %s", st.GetType(), st.GetPredicateType(), ita.StatementTypeUri, PredicateType)
	}
	subjects := map[string]string{}
	for _, s := range st.GetSubject() {
		if _, dup := subjects[s.GetName()]; dup {
			return nil, nil, fmt.Errorf("subject %q listed twice", s.GetName())
		}
		subjects[s.GetName()] = s.GetDigest()["sha256"]
	}
	pj, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, nil, err
	}
	var pred Predicate
	if err := json.Unmarshal(pj, &pred); err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	return subjects, &pred, nil
}
