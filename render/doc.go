// Package render writes what gpusnap prints, such as findings as text, ps,
// show, events, any --json value and the bundle's report pages. It takes
// snapshots, diff results and event logs and writes bytes. It never
// captures, opens a store or decides a finding. A finding's words stay with
// diff's rules, since render imports diff and diff cannot call render.
package render
