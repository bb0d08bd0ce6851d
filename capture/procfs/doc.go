// Package procfs is the capture's ground floor. It holds the parsers of the
// text /proc renders and the reader that reads beneath a proc root, bounded,
// never following a link out of the tree. Of gpusnap's packages it imports
// snapshot alone, for its plain types, and each parser has a fuzz target,
// since the text is a tenant's or a stranger's.
package procfs
