package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// permuteArgs moves the flags that follow a command's arguments in front of
// them. Operators type `gpusnap verify FILE --pub KEY` and
// `gpusnap bundle FROM TO -o FILE`, but urfave/cli v2 stops reading flags at
// the first argument. Everything after "--" stays an argument, and so does
// "-" (standard input).
func permuteArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	flags, rest := splitFlags(app.Flags, args[1:], true)
	out = append(out, flags...)
	if len(rest) == 0 {
		return out
	}
	cmd := app.Command(rest[0])
	out = append(out, rest[0])
	rest = rest[1:]
	for cmd != nil {
		// A command with subcommands takes its own flags before the
		// subcommand's name only, and those after it are the subcommand's.
		flags, rest = splitFlags(cmd.Flags, rest, len(cmd.Subcommands) > 0)
		out = append(out, flags...)
		var sub *cli.Command
		if len(rest) > 0 && rest[0] != "--" {
			sub = cmd.Command(rest[0])
		}
		if sub == nil {
			break
		}
		out = append(out, rest[0])
		rest, cmd = rest[1:], sub
	}
	return append(out, rest...)
}

// splitFlags separates the flags of args (with the values that non-boolean
// flags take) from its arguments. With leading, it stops at the first
// argument, since the global flags end where the command's name stands.
func splitFlags(defs []cli.Flag, args []string, leading bool) (flags, rest []string) {
	takesValue := map[string]bool{}
	for _, f := range defs {
		_, isBool := f.(*cli.BoolFlag)
		for _, name := range f.Names() {
			takesValue[name] = !isBool
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(rest, args[i:]...)
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			if leading {
				return flags, args[i:]
			}
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, rest
}
