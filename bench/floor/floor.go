// Package floor is the raw floor of a /proc capture, the kernel's own cost
// of what any snapshot tool must at least ask of it. One thread reads every
// /proc/PID/maps and readlinks every /proc/PID/fd/N, with reused buffers and
// bare system calls, and parses nothing but directory entries. gpusnap's speed
// target is a ratio to this floor (bench/run.sh, BenchmarkRawFloor).
package floor

import (
	"syscall"
)

// Counts is what one walk touched, so a caller can check it did the work.
type Counts struct {
	Processes int   // /proc/PID directories listed
	MapsBytes int64 // bytes of maps text read
	Links     int   // fd links read
}

// Walker walks a proc root, reusing its buffers from walk to walk.
type Walker struct {
	dirBuf, fdBuf, readBuf, linkBuf []byte
}

// NewWalker returns a Walker with buffers sized for a typical host.
func NewWalker() *Walker {
	return &Walker{
		dirBuf: make([]byte, 32<<10), fdBuf: make([]byte, 8<<10),
		readBuf: make([]byte, 64<<10), linkBuf: make([]byte, 4096),
	}
}

// Walk reads every maps file and every fd link under root (e.g. "/proc").
// Processes that vanish or refuse mid-walk are skipped, as a capture must.
func (w *Walker) Walk(root string) (Counts, error) {
	var c Counts
	dfd, err := syscall.Open(root, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return c, err
	}
	defer syscall.Close(dfd)
	for {
		n, err := syscall.ReadDirent(dfd, w.dirBuf)
		if err != nil {
			return c, err
		}
		if n <= 0 {
			return c, nil
		}
		_, _, names := syscall.ParseDirent(w.dirBuf[:n], -1, nil)
		for _, name := range names {
			if name[0] < '0' || name[0] > '9' {
				continue
			}
			c.Processes++
			dir := root + "/" + name
			c.MapsBytes += w.readAll(dir + "/maps")
			c.Links += w.readLinks(dir + "/fd")
		}
	}
}

// readAll reads path to its end and returns the bytes read.
func (w *Walker) readAll(path string) int64 {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer syscall.Close(fd)
	var total int64
	for {
		n, err := syscall.Read(fd, w.readBuf)
		if n <= 0 || err != nil {
			return total
		}
		total += int64(n)
	}
}

// readLinks readlinks every entry of the fd directory dir.
func (w *Walker) readLinks(dir string) int {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer syscall.Close(fd)
	links := 0
	for {
		n, err := syscall.ReadDirent(fd, w.fdBuf)
		if n <= 0 || err != nil {
			return links
		}
		_, _, names := syscall.ParseDirent(w.fdBuf[:n], -1, nil)
		for _, name := range names {
			if _, err := syscall.Readlink(dir+"/"+name, w.linkBuf); err == nil {
				links++
			}
		}
	}
}
