package bundle

import (
	"crypto/ed25519"
	"encoding/base64"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// Predicate is the statement's predicate, what the bundle is about. The
// payload files' hashes are the statement's subjects.
type Predicate struct {
	GpusnapVersion string       `json:"gpusnap_version"`
	UID            int          `json:"uid"` // the uid that ran gpusnap
	Tenant         string       `json:"tenant,omitempty"`
	Host           HostFacts    `json:"host"`
	Before         SnapshotRef  `json:"before"`
	After          SnapshotRef  `json:"after"`
	TenantStart    *time.Time   `json:"tenant_start,omitempty"`
	TenantEnd      *time.Time   `json:"tenant_end,omitempty"`
	Summary        diff.Summary `json:"summary"`
	// FindingsSHA256 is the SHA-256 of data/findings.json.
	FindingsSHA256 string `json:"findings_sha256"`
	// Signer is the key whose signature the envelope carries, nil when unsigned.
	Signer *Signer `json:"signer,omitempty"`
	// Store is the store's log as the bundle was written, its checkpoint and
	// the inclusion of the two snapshots. It is nil when the store was not
	// read.
	Store *StoreEvidence `json:"store,omitempty"`
}

// StoreEvidence places the bundle's snapshots in the store's log.
type StoreEvidence struct {
	// Checkpoint is the log's head as a C2SP checkpoint, signed with the
	// bundle's key when it is signed (its body alone when not).
	Checkpoint string                `json:"checkpoint"`
	Inclusion  []tlog.InclusionProof `json:"inclusion"`
	// NotStored names a snapshot of the two that the store does not hold
	// (TO captured for the bundle and not stored).
	NotStored []string `json:"not_stored,omitempty"`
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

// Signer says who signed the statement.
type Signer struct {
	Algorithm string `json:"algorithm"`  // ed25519
	KeyID     string `json:"keyid"`      // the envelope signature's keyid (KeyID)
	PublicKey string `json:"public_key"` // standard base64 of the 32-byte key
}

func newPredicate(in Input, findings []byte) *Predicate {
	m := &Predicate{
		GpusnapVersion: in.Version,
		UID:            in.UID,
		Tenant:         in.Result.Tenant,
		Host: HostFacts{
			Hostname:      in.After.Host.Hostname,
			KernelRelease: in.After.Host.KernelRelease,
			BootID:        in.After.Host.BootID,
			DriverVersion: in.After.NVML.DriverVersion,
		},
		Before:         snapshotRef(in.Before),
		After:          snapshotRef(in.After),
		TenantStart:    optionalTime(in.TenantStart),
		TenantEnd:      optionalTime(in.TenantEnd),
		Summary:        in.Result.Summary,
		FindingsSHA256: sha256Hex(findings),
		Store:          in.Store,
	}
	if m.Tenant == "" {
		m.Tenant = in.After.Tenant
	}
	if in.SignKey != nil {
		pub := in.SignKey.Public().(ed25519.PublicKey)
		m.Signer = &Signer{Algorithm: "ed25519", KeyID: KeyID(pub), PublicKey: base64.StdEncoding.EncodeToString(pub)}
	}
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
