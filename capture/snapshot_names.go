package capture

import "github.com/gpusnap/gpusnap/snapshot"

// The snapshot types and limits the capture fills in, by their short names.
type (
	Ancestor      = snapshot.Ancestor
	Cut           = snapshot.Cut
	DeviceClasses = snapshot.DeviceClasses
	FileKind      = snapshot.FileKind

	HiddenProcess = snapshot.HiddenProcess
	Holder        = snapshot.Holder
	Host          = snapshot.Host
	Mapping       = snapshot.Mapping
	MappingRun    = snapshot.MappingRun
	NVML          = snapshot.NVML
	Package       = snapshot.Package
	Raw           = snapshot.Raw
	Process       = snapshot.Process
	Scan          = snapshot.Scan
	Snapshot      = snapshot.Snapshot
	Socket        = snapshot.Socket
)

const (
	ClassAnonExec      = snapshot.ClassAnonExec
	ClassNVIDIA        = snapshot.ClassNVIDIA
	ClassOther         = snapshot.ClassOther
	CmdlineLimit       = snapshot.CmdlineLimit
	MappingsPerDevice  = snapshot.MappingsPerDevice
	MaxAncestry        = snapshot.MaxAncestry
	NVMLSourceDisabled = snapshot.NVMLSourceDisabled
	HashOK             = snapshot.HashOK
	HashTooLarge       = snapshot.HashTooLarge
	HashUnreadable     = snapshot.HashUnreadable
	TextLimit          = snapshot.TextLimit
)

var (
	GPUUsage  = snapshot.GPUUsage
	StartedAt = snapshot.StartedAt
	NewID     = snapshot.NewID
)
