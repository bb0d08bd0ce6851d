// Command rawfloor walks /proc once as the raw floor does (package floor) and
// prints what it touched on stderr. bench/run.sh times it beside gpusnap.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpusnap/gpusnap/bench/floor"
)

func main() {
	root := flag.String("proc-root", "/proc", "the proc root to walk")
	flag.Parse()
	c, err := floor.NewWalker().Walk(*root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawfloor: %s: %v\n", *root, err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "rawfloor: %d processes, %d bytes of maps, %d fd links\n", c.Processes, c.MapsBytes, c.Links)
}
