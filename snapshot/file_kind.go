package snapshot

// FileKind is what stat of a mapped file or an fd said, the file type and,
// for a device node, its own number.
type FileKind struct {
	Device bool   // a character or block device node
	Char   bool   // character (else block) device, where Device
	Major  uint32 // the device's own number, where Device
	Minor  uint32
	// Anon says the inode has no file type, as an anonymous inode (an
	// io_uring, an eventfd, an epoll fd) has none.
	Anon bool
}
