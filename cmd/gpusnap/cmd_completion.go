package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:  "completion",
		Usage: "print the shell completion script for bash, zsh or fish",
		UsageText: "gpusnap completion bash|zsh|fish\n\nExamples:\n" +
			"  source <(gpusnap completion bash)\n" +
			"  gpusnap completion zsh >\"${fpath[1]}/_gpusnap\"\n" +
			"  gpusnap completion fish >~/.config/fish/completions/gpusnap.fish",
		Action: action(parseCompletion, runCompletion),
	}
}

type completionOptions struct{ Shell string }

func parseCompletion(c *cli.Context) (completionOptions, error) {
	if c.NArg() != 1 || !slices.Contains([]string{"bash", "zsh", "fish"}, c.Args().First()) {
		return completionOptions{}, usageError(fmt.Errorf("completion takes one shell: bash, zsh or fish"))
	}
	return completionOptions{Shell: c.Args().First()}, nil
}

func runCompletion(_ context.Context, g globals, o completionOptions) error {
	app := newApp(io.Discard, io.Discard)
	switch o.Shell {
	case "bash":
		_, err := io.WriteString(g.Stdout, bashCompletion(app))
		return err
	case "zsh":
		_, err := io.WriteString(g.Stdout, zshCompletion(app))
		return err
	}
	s, err := app.ToFishCompletion()
	if err != nil {
		return err
	}
	_, err = io.WriteString(g.Stdout, s)
	return err
}

// completionWords is the shell function both bash's and zsh's scripts
// share. For a command path ("", "diff", "store verify") it gives the words
// that may follow it, and the flags that take a value (the word after one is
// not a command, and completes as a file name).
func completionWords(app *cli.App) string {
	var b strings.Builder
	values := map[string]bool{}
	b.WriteString("_gpusnap_words() {\n\tcase $1 in\n")
	var walk func(path string, cmds []*cli.Command, flags []cli.Flag)
	walk = func(path string, cmds []*cli.Command, flags []cli.Flag) {
		var words []string
		for _, c := range cmds {
			if !c.Hidden {
				words = append(words, c.Name)
			}
		}
		for _, f := range flags {
			for _, n := range f.Names() {
				words = append(words, flagName(n))
				if v, ok := f.(cli.DocGenerationFlag); ok && v.TakesValue() {
					values[flagName(n)] = true
				}
			}
		}
		words = append(words, "--help")
		fmt.Fprintf(&b, "\t%q) echo %q ;;\n", path, strings.Join(words, " "))
		for _, c := range cmds {
			if !c.Hidden {
				walk(strings.TrimSpace(path+" "+c.Name), c.Subcommands, c.VisibleFlags())
			}
		}
	}
	walk("", app.Commands, append(app.VisibleFlags(), &cli.BoolFlag{Name: "version"}))
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(&b, "\tesac\n}\n\n_gpusnap_takes_value() {\n\tcase $1 in\n\t%s) return 0 ;;\n\tesac\n\treturn 1\n}\n\n", strings.Join(names, "|"))
	// The command path is the first word that is no flag (nor a flag's
	// value), then each word that the path so far lists as a subcommand.
	b.WriteString(`_gpusnap_path() {
	_gpusnap_cmd=
	while [ $# -gt 0 ]; do
		if _gpusnap_takes_value "$1"; then
			shift
		elif [ "${1#-}" = "$1" ]; then
			if [ -z "$_gpusnap_cmd" ]; then
				_gpusnap_cmd=$1
			else
				case " $(_gpusnap_words "$_gpusnap_cmd") " in
				*" $1 "*) _gpusnap_cmd="$_gpusnap_cmd $1" ;;
				esac
			fi
		fi
		[ $# -gt 0 ] && shift
	done
}
`)
	return b.String()
}

func flagName(n string) string {
	if len(n) == 1 {
		return "-" + n
	}
	return "--" + n
}

func bashCompletion(app *cli.App) string {
	return "# bash completion for gpusnap: source <(gpusnap completion bash)\n\n" + completionWords(app) + `
_gpusnap() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	COMPREPLY=()
	# A flag's value: let bash complete a file name (complete -o default).
	_gpusnap_takes_value "${COMP_WORDS[COMP_CWORD-1]}" && return 0
	_gpusnap_path "${COMP_WORDS[@]:1:COMP_CWORD-1}"
	COMPREPLY=($(compgen -W "$(_gpusnap_words "$_gpusnap_cmd")" -- "$cur"))
}
complete -o default -F _gpusnap gpusnap
`
}

func zshCompletion(app *cli.App) string {
	return "#compdef gpusnap\n# zsh completion for gpusnap: gpusnap completion zsh >\"${fpath[1]}/_gpusnap\"\n\n" + completionWords(app) + `
_gpusnap() {
	if _gpusnap_takes_value "${words[CURRENT-1]}"; then
		_files
		return
	fi
	_gpusnap_path "${(@)words[2,CURRENT-1]}"
	compadd -- ${=$(_gpusnap_words "$_gpusnap_cmd")}
}

# Autoloaded from fpath the file is _gpusnap's body; sourced, it registers it.
if [ "$funcstack[1]" = "_gpusnap" ]; then
	_gpusnap "$@"
else
	compdef _gpusnap gpusnap
fi
`
}
