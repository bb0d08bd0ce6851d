package snapshot

// Package is the Debian package that owns a process's exe path, and whether
// the file the process runs is that package's (provenance.Verified ...).
type Package struct {
	Name   string `json:"name,omitempty"`
	Status string `json:"status"`
}

// Hash statuses of Process.HashStatus.
const (
	HashOK         = "ok"
	HashTooLarge   = "too_large"  // larger than the hash limit, so not read
	HashUnreadable = "unreadable" // not opened, or read short, as no hash is given for what was not read whole
)
