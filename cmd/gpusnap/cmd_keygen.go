package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/render"
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
		Action: action(parseKeygen, runKeygen),
	}
}

// keygenOptions are keygen's flags.
type keygenOptions struct {
	Prefix string // -o, naming PREFIX.key and PREFIX.pub
	Force  bool
}

func parseKeygen(c *cli.Context) (keygenOptions, error) {
	o := keygenOptions{Prefix: c.String("output"), Force: c.Bool("force")}
	if o.Prefix == "" {
		return o, usageError(errors.New("keygen needs -o PREFIX"))
	}
	return o, nil
}

func runKeygen(ctx context.Context, g globals, o keygenOptions) error {
	prefix := o.Prefix
	pub, err := bundle.WriteKeyPair(ctx, prefix, o.Force)
	if err != nil {
		return err
	}
	if g.JSON {
		return render.JSON(g.Stdout, map[string]string{"private_key": prefix + ".key", "public_key": prefix + ".pub", "key_id": bundle.KeyID(pub)})
	}
	fmt.Fprintf(g.Stdout, "wrote %s (private: keep it secret) and %s\n", prefix+".key", prefix+".pub")
	fmt.Fprintf(g.Stdout, "public key: %s\n", bundle.KeyID(pub))
	return nil
}
