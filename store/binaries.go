package store

import "os"

// BinaryCachePath is where captures keep the binary cache that goes with the
// store at path (capture.Options.BinaryCache: the GPU users' exe digests
// and dpkg owners, reused by the next capture): beside it, held to the
// store's own rules. It is "" where, as root, the store's path or the
// cache's would be refused (one another user could tamper with): no capture
// then trusts or writes a cache.
func BinaryCachePath(path string) string {
	cache := path + ".binaries"
	if os.Geteuid() == 0 && (checkPath(path, 0) != nil || checkPath(cache, 0) != nil) {
		return ""
	}
	return cache
}
