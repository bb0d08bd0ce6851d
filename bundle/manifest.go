package bundle

import (
	"crypto/ed25519"
	"sort"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Format names the bundle layout; verify refuses a manifest of another.
const Format = "gpusnap-bundle/1"

// Manifest is manifest.json: what the bundle is about and the SHA-256 of every
// file in it except itself, its signature and SHA256SUMS (which holds the
// manifest's own hash, and is checked byte for byte against the manifest).
type Manifest struct {
	Format         string       `json:"format"`
	GpusnapVersion string       `json:"gpusnap_version"`
	UID            int          `json:"uid"` // the uid that ran gpusnap
	Tenant         string       `json:"tenant,omitempty"`
	Host           HostFacts    `json:"host"`
	Before         SnapshotRef  `json:"before"`
	After          SnapshotRef  `json:"after"`
	TenantStart    *time.Time   `json:"tenant_start,omitempty"`
	TenantEnd      *time.Time   `json:"tenant_end,omitempty"`
	Summary        diff.Summary `json:"summary"`
	// Signer is the public key whose signature is manifest.sig; nil when unsigned.
	Signer *Signer    `json:"signer,omitempty"`
	Files  []FileHash `json:"files"`
}

// HostFacts place the TO snapshot on a machine.
type HostFacts struct {
	Hostname      string `json:"hostname"`
	KernelRelease string `json:"kernel_release"`
	BootID        string `json:"boot_id"`
	DriverVersion string `json:"driver_version,omitempty"` // from NVML
}

// SnapshotRef names one of the two snapshots.
type SnapshotRef struct {
	ID           string    `json:"id"`
	Label        string    `json:"label"`
	Tenant       string    `json:"tenant,omitempty"`
	Hostname     string    `json:"hostname"`
	BootID       string    `json:"boot_id"`
	CaptureStart time.Time `json:"capture_start"`
	CaptureEnd   time.Time `json:"capture_end"`
}

// Signer says who signed the manifest.
type Signer struct {
	Algorithm string `json:"algorithm"`  // ed25519
	PublicKey string `json:"public_key"` // standard base64 of the 32-byte key
}

// FileHash is one file of the bundle.
type FileHash struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func newManifest(in Input, files map[string][]byte) *Manifest {
	m := &Manifest{
		Format:         Format,
		GpusnapVersion: in.Version,
		UID:            in.UID,
		Tenant:         in.Result.Tenant,
		Host: HostFacts{
			Hostname:      in.After.Host.Hostname,
			KernelRelease: in.After.Host.KernelRelease,
			BootID:        in.After.Host.BootID,
			DriverVersion: in.After.NVML.DriverVersion,
		},
		Before:      snapshotRef(in.Before),
		After:       snapshotRef(in.After),
		TenantStart: optionalTime(in.TenantStart),
		TenantEnd:   optionalTime(in.TenantEnd),
		Summary:     in.Result.Summary,
		Files:       make([]FileHash, 0, len(files)),
	}
	if m.Tenant == "" {
		m.Tenant = in.After.Tenant
	}
	if in.SignKey != nil {
		m.Signer = &Signer{Algorithm: "ed25519", PublicKey: KeyID(in.SignKey.Public().(ed25519.PublicKey))}
	}
	for name, b := range files {
		m.Files = append(m.Files, FileHash{Name: name, Size: int64(len(b)), SHA256: sha256Hex(b)})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	return m
}

func snapshotRef(s *snapshot.Snapshot) SnapshotRef {
	return SnapshotRef{
		ID:           s.ID,
		Label:        s.Label,
		Tenant:       s.Tenant,
		Hostname:     s.Host.Hostname,
		BootID:       s.Host.BootID,
		CaptureStart: s.Host.CaptureStart.UTC(),
		CaptureEnd:   s.Host.CaptureEnd.UTC(),
	}
}

// optionalTime keeps a known time, in UTC so the manifest does not depend on
// the writer's time zone.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
