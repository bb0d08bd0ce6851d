package snapshot

// MaxAncestry bounds a process's ancestry, since a tenant can fork a chain
// of thousands.
const MaxAncestry = 32

// Ancestor is one parent in a process's ancestry, as the same snapshot saw it.
type Ancestor struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Comm      string `json:"comm"`
	Exe       string `json:"exe,omitempty"`
}
