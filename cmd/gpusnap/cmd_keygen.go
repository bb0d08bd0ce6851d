package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
)

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "write an ed25519 key pair for signing evidence bundles",
		UsageText: "gpusnap keygen -o PREFIX [--force]\n\n" +
			"Writes PREFIX.key (PKCS#8 PEM, mode 0600: keep it on the host that signs) and PREFIX.pub\n" +
			"(PKIX PEM: give it to whoever checks bundles with `gpusnap verify --pub`). Both are the\n" +
			"encodings openssl reads.\n\nExample:\n  gpusnap keygen -o /etc/gpusnap/bundle",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write `PREFIX`.key and PREFIX.pub"},
			&cli.BoolFlag{Name: "force", Usage: "replace existing key files"},
		},
		Action: runKeygen,
	}
}

func runKeygen(c *cli.Context) error {
	g, err := loadGlobals(c)
	if err != nil {
		return err
	}
	prefix := c.String("output")
	if prefix == "" {
		return usageError(errors.New("keygen needs -o PREFIX"))
	}
	pub, err := bundle.WriteKeyPair(prefix, c.Bool("force"))
	if err != nil {
		return err
	}
	if g.JSON {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]string{"private_key": prefix + ".key", "public_key": prefix + ".pub", "key_id": bundle.KeyID(pub)})
	}
	fmt.Fprintf(g.Stdout, "wrote %s (private: keep it secret) and %s\n", prefix+".key", prefix+".pub")
	fmt.Fprintf(g.Stdout, "public key: %s\n", bundle.KeyID(pub))
	return nil
}
