package store

import "os"

// BinaryCachePath is where captures keep the binary cache of the store at
// path (capture.Options.BinaryCache), held to the store's own rules. It is ""
// where root would refuse the store's path or the cache's, because another
// user could tamper with them, and then no capture trusts or writes a cache.
func BinaryCachePath(path string) string {
	cache := path + ".binaries"
	if os.Geteuid() == 0 && (checkPath(path, 0) != nil || checkPath(cache, 0) != nil) {
		return ""
	}
	return cache
}
