package main

import (
	"github.com/urfave/cli/v2"
)

func expectWatchFlag() cli.Flag {
	return &cli.BoolFlag{Name: "expect-watch", EnvVars: []string{"GPUSNAP_EXPECT_WATCH"},
		Usage: "gpusnap watch is configured to record on this host: a window its event log does not cover whole is a window_not_covered finding (docs/diff.md)"}
}
