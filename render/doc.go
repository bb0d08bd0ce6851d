// Package render writes what gpusnap shows people and scripts: a diff's or
// a check's findings as text, ps's table and per-GPU section, show's
// summary, the event log's lines and utilization table, any --json value
// (a snapshot's encoded on every CPU), and the evidence bundle's report.md
// and report.html (with its SVG charts). It takes the data types
// (snapshots, diff results, the event log's window, the kubelet's
// allocations) and writes bytes; it never captures, opens a store or
// decides a finding, so a new format has one home and links nothing of the
// capture.
//
// render imports diff, so diff cannot call it: the words a finding is made
// of (its summary, snapshot.ExeText, snapshot.UserText) stay with the rules
// that write them, and render only lays out what they wrote.
package render
