package store

import (
	"encoding/binary"
	"os"

	bolt "go.etcd.io/bbolt"
)

// bbolt's on-disk layout (go.etcd.io/bbolt/internal/common, format version
// 2) starts a page with a 16-byte header (id, flags, count, overflow). A meta
// page holds magic, version, page size, flags, the root bucket (16 bytes),
// then the freelist page id, the high-water page id and the txid.
const (
	pageHeaderSize   = 16
	metaFreelistOff  = pageHeaderSize + 32
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0) // bbolt's pgidNoFreelist, for a freelist not stored
)

// checkFreelist validates the freelist the current meta page points at. bbolt
// trusts it blindly, as a read-write open loads it, and a corrupt one makes
// the next commit write pages at absurd offsets or panic. Run it inside a
// transaction, so no writer can be rewriting it.
func (s *Store) checkFreelist(tx *bolt.Tx) error {
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	ps := int64(s.db.Info().PageSize)
	highWater := uint64(tx.Size() / ps)
	bad := func(format string, args ...any) error {
		return s.damaged("freelist: "+format, args...)
	}

	// bbolt writes the meta of txid N to page N%2.
	meta := make([]byte, pageHeaderSize+64)
	if _, err := f.ReadAt(meta, int64(tx.ID()%2)*ps); err != nil {
		return bad("read meta page: %v", err)
	}
	if txid := binary.LittleEndian.Uint64(meta[metaFreelistOff+16:]); txid != uint64(tx.ID()) {
		return bad("meta page %d holds txid %d, not the current %d", tx.ID()%2, txid, tx.ID())
	}
	pgid := binary.LittleEndian.Uint64(meta[metaFreelistOff:])
	if pgid == noFreelist {
		return nil
	}
	if pgid < 2 || pgid >= highWater {
		return bad("page id %d outside the file's %d pages", pgid, highWater)
	}
	hdr := make([]byte, pageHeaderSize+8)
	if _, err := f.ReadAt(hdr, int64(pgid)*ps); err != nil {
		return bad("read page %d: %v", pgid, err)
	}
	flags, count := binary.LittleEndian.Uint16(hdr[8:]), uint64(binary.LittleEndian.Uint16(hdr[10:]))
	overflow := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if flags != freelistPageFlag {
		return bad("page %d has flags %#x, not a freelist's", pgid, flags)
	}
	start := int64(pageHeaderSize)
	if count == 0xFFFF { // an overflowing count is kept in the first element
		count = binary.LittleEndian.Uint64(hdr[pageHeaderSize:])
		start += 8
	}
	if pgid+overflow >= highWater || uint64(start)+count*8 > (overflow+1)*uint64(ps) {
		return bad("page %d claims %d free pages over %d overflow pages, beyond the file", pgid, count, overflow)
	}
	ids := make([]byte, count*8)
	if _, err := f.ReadAt(ids, int64(pgid)*ps+start); err != nil {
		return bad("read page %d: %v", pgid, err)
	}
	var prev uint64
	for i := uint64(0); i < count; i++ {
		id := binary.LittleEndian.Uint64(ids[i*8:])
		if id < 2 || id >= highWater {
			return bad("free page id %d outside the file's %d pages", id, highWater)
		}
		if id <= prev {
			return bad("free page ids out of order or repeated at %d", id)
		}
		prev = id
	}
	return nil
}
