package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// completionScript writes gpusnap completion SHELL to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, errs := gpusnap(t, "completion", shell)
	if code != 0 || out == "" {
		t.Fatalf("completion %s: exit %d: %s", shell, code, errs)
	}
	path := filepath.Join(t.TempDir(), "gpusnap."+shell)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func shellOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestCompletionBash completes command lines in a real bash, as its
// programmable completion calls the function.
func TestCompletionBash(t *testing.T) {
	livetest.Require(t, "bash")
	script := completionScript(t, "bash")
	for _, tc := range []struct{ line, want string }{
		{"gpusnap di", "diff"},
		{"gpusnap --db /x/gpusnap.db sn", "snapshot"},
		{"gpusnap diff --fai", "--fail-on"},
		{"gpusnap store ch", "check checkpoint"},
		{"gpusnap store v", "verify"},
		{"gpusnap --db store sn", "snapshot"}, // "store" is --db's value, not the command
		{"gpusnap completion --no-n", "--no-nvml"},
		{"gpusnap diff --allow ", ""}, // a flag's value: bash's default, file names
		{"gpusnap ma", ""},            // the build's man command is not offered
	} {
		words := strings.Split(tc.line, " ")
		got := shellOut(t, "bash", append([]string{"-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _gpusnap; echo "${COMPREPLY[*]}"`,
			"bash", script}, words...)...)
		if got != tc.want {
			t.Errorf("bash completes %q to %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestCompletionZsh loads the script as zsh's completion system does (from
// fpath, after compinit) and walks the same command paths.
func TestCompletionZsh(t *testing.T) {
	livetest.Require(t, "zsh")
	script := completionScript(t, "zsh")
	dir := filepath.Dir(script)
	if err := os.Rename(script, filepath.Join(dir, "_gpusnap")); err != nil {
		t.Fatal(err)
	}
	got := shellOut(t, "zsh", "-f", "-c", `fpath=("$1" $fpath); autoload -U compinit; compinit -u -D; echo "$_comps[gpusnap]"`, "zsh", dir)
	if got != "_gpusnap" {
		t.Errorf("zsh's compinit registers %q for gpusnap, want _gpusnap", got)
	}
	shellOut(t, "zsh", "-n", filepath.Join(dir, "_gpusnap"))
	body := `source <(sed '/^if \[ "$funcstack/,$d' "$1"); _gpusnap_path --db x store check; echo "$_gpusnap_cmd|$(_gpusnap_words store)"`
	got = shellOut(t, "zsh", "-f", "-c", body, "zsh", filepath.Join(dir, "_gpusnap"))
	if cmd, words, _ := strings.Cut(got, "|"); cmd != "store check" || !strings.HasPrefix(words, "check ") {
		t.Errorf("zsh: command path %q, words of store %q", cmd, words)
	}
}

// TestCompletionFish asks a real fish what it completes.
func TestCompletionFish(t *testing.T) {
	livetest.Require(t, "fish")
	script := completionScript(t, "fish")
	got := shellOut(t, "fish", "--no-config", "-c", `source $argv[1]; complete -C "gpusnap di"`, script)
	if !strings.HasPrefix(got, "diff\t") {
		t.Errorf("fish completes gpusnap di to %q, want diff", got)
	}
	got = shellOut(t, "fish", "--no-config", "-c", `source $argv[1]; complete -C "gpusnap diff --fail"`, script)
	if !strings.Contains(got, "--fail-on") {
		t.Errorf("fish completes gpusnap diff --fail to %q, want --fail-on", got)
	}
}

func TestCompletionUsage(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		code, out, errs := gpusnap(t, args...)
		oneLine(t, args, code, out, errs, "completion takes one shell")
	}
}

// TestManPages writes the man pages and reads them back with man(1): one
// for gpusnap and one for each command, each naming its own flags, none
// with a formatting warning.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := gpusnap(t, "man", dir); code != 0 {
		t.Fatalf("man: exit %d: %s", code, errs)
	}
	app := newApp(nil, nil)
	want := map[string][]string{"gpusnap.1": {"snapshot", "--db"}}
	for _, c := range app.Commands {
		if c.Hidden {
			continue
		}
		var flags []string
		for _, f := range c.Flags {
			flags = append(flags, "--"+f.Names()[0])
		}
		want["gpusnap-"+c.Name+".1"] = flags
		for _, s := range c.Subcommands {
			want["gpusnap-"+c.Name+"-"+s.Name+".1"] = nil
		}
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	if len(pages) != len(want) {
		t.Errorf("%d man pages, want %d: %q", len(pages), len(want), pages)
	}
	hasMan := exec.Command("man", "--version").Run() == nil
	for name, words := range want {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("man page %s: %v", name, err)
			continue
		}
		if !strings.Contains(string(data), ".TH "+strings.TrimSuffix(name, ".1")+" 1") {
			t.Errorf("%s has no title line for section 1:\n%.300s", name, data)
		}
		for _, w := range words {
			if !strings.Contains(strings.ReplaceAll(string(data), `\-`, "-"), w) {
				t.Errorf("%s does not name %s", name, w)
			}
		}
		if !hasMan {
			continue
		}
		cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", path)
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man %s: %v %s", name, err, stderr.String())
		}
	}
}
