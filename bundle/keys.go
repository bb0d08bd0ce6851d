package bundle

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"

	"github.com/gpusnap/gpusnap/internal/safefile"
)

// Keys are PEM files in the standard encodings that openssl writes and
// reads, PKCS#8 "PRIVATE KEY" and PKIX "PUBLIC KEY", so a responder without
// gpusnap loads the public key into any DSSE verifier (docs/bundle.md).

// WriteKeyPair writes a new ed25519 key pair to prefix+".key" (mode 0600)
// and prefix+".pub" (0644). Neither may exist unless force is set.
func WriteKeyPair(ctx context.Context, prefix string, force bool) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	keyFile, pubFile := prefix+".key", prefix+".pub"
	if !force {
		// Refuse before writing either, so a clash leaves no half pair.
		for _, name := range []string{keyFile, pubFile} {
			if _, err := os.Lstat(name); err == nil {
				return nil, fmt.Errorf("%s exists (use --force to replace it)", name)
			}
		}
	}
	if err := writePEM(ctx, keyFile, 0o600, force, "PRIVATE KEY", privDER); err != nil {
		return nil, err
	}
	if err := writePEM(ctx, pubFile, 0o644, force, "PUBLIC KEY", pubDER); err != nil {
		os.Remove(keyFile)
		return nil, err
	}
	return pub, nil
}

func writePEM(ctx context.Context, name string, perm os.FileMode, force bool, typ string, der []byte) error {
	return safefile.Create(ctx, name, perm, force, func(w io.Writer) error {
		return pem.Encode(w, &pem.Block{Type: typ, Bytes: der})
	})
}

// ReadPrivateKey reads an ed25519 private key written by WriteKeyPair (or by
// `openssl genpkey -algorithm ed25519`).
func ReadPrivateKey(name string) (ed25519.PrivateKey, error) {
	der, err := readPEM(name, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an ed25519 private key", name, k)
	}
	return priv, nil
}

// ReadPublicKey reads an ed25519 public key written by WriteKeyPair (or by
// `openssl pkey -pubout`).
func ReadPublicKey(name string) (ed25519.PublicKey, error) {
	der, err := readPEM(name, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an ed25519 public key", name, k)
	}
	return pub, nil
}

func readPEM(name, typ string) ([]byte, error) {
	// A PEM key is a few hundred bytes. A FIFO or /dev/zero named as one is refused.
	b, err := safefile.ReadFile(name, 64<<10)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: not a PEM file", name)
	}
	if block.Type != typ {
		return nil, fmt.Errorf("%s: a PEM %q block, want %q", name, block.Type, typ)
	}
	return block.Bytes, nil
}
