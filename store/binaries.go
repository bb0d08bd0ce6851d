package store

import "os"

// BinaryCachePath is where captures keep the binary cache of the store at
// path (capture.Options.BinaryCache), held to the store's own rules (see
// sidecarPath).
func BinaryCachePath(path string) string {
	return sidecarPath(path, ".binaries")
}

// ProcessCachePath is where captures keep the process cache of the store at
// path (capture.Options.ProcessCache), held to the store's own rules (see
// sidecarPath).
func ProcessCachePath(path string) string {
	return sidecarPath(path, ".processes")
}

// sidecarPath is the file beside the store at path named by suffix. It is ""
// where root would refuse the store's path or the file's, because another
// user could tamper with them, and then no capture trusts or writes it.
func sidecarPath(path, suffix string) string {
	file := path + suffix
	if os.Geteuid() == 0 && (checkPath(path, 0) != nil || checkPath(file, 0) != nil) {
		return ""
	}
	return file
}
