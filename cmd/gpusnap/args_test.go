package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestPermuteArgs(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, c := range []struct{ in, want string }{
		{"gpusnap verify F --pub K", "gpusnap verify --pub K F"},
		{"gpusnap verify F --pub=K --json", "gpusnap verify --pub=K --json F"},
		{"gpusnap --db X verify F --json --lock-timeout 3s", "gpusnap --db X verify --json --lock-timeout 3s F"},
		{"gpusnap --no-nvml verify F", "gpusnap --no-nvml verify F"},
		{"gpusnap verify - --pub K", "gpusnap verify --pub K -"},
		{"gpusnap verify F -- --pub K", "gpusnap verify F -- --pub K"},
		{"gpusnap keygen -o P --force", "gpusnap keygen -o P --force"},
		// A subcommand's flags stay its own, with their values.
		{"gpusnap store checkpoint --sign-key K --db D", "gpusnap store checkpoint --sign-key K --db D"},
		{"gpusnap store verify --pub K --checkpoint C", "gpusnap store verify --pub K --checkpoint C"},
		{"gpusnap nosuch A --x", "gpusnap nosuch A --x"},
		{"gpusnap", "gpusnap"},
	} {
		if got := permuteArgs(app, strings.Fields(c.in)); !reflect.DeepEqual(got, strings.Fields(c.want)) {
			t.Errorf("permuteArgs(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}
