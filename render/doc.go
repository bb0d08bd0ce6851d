// Package render writes what gpusnap shows people: the evidence bundle's
// report.md and report.html (with its SVG charts). It takes the data types
// (snapshots, diff results, the event log's window) and writes bytes; it
// never captures, opens a store or decides a finding, so a new format has
// one home and links nothing of the capture.
package render
