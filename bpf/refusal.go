package bpf

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
)

// Refused reports whether err, from OpenWalk, is the kernel's lasting answer
// to these programs for these credentials until a reboot or another kernel.
// Such answers are a permission refused, the verifier's verdict, a feature
// or a kernel file missing. A shortage that may pass (memory, descriptors, a
// busy or interrupted call) is not one, since the same load retried may
// succeed.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	for _, passing := range []error{syscall.ENOMEM, syscall.EAGAIN, syscall.EINTR, syscall.EBUSY, syscall.ENOSPC, syscall.EMFILE, syscall.ENFILE} {
		if errors.Is(err, passing) {
			return false
		}
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return true
	}
	const enotsupp = syscall.Errno(524) // the kernel's ENOTSUPP, which no libc names
	for _, lasting := range []error{os.ErrPermission, ebpf.ErrNotSupported, os.ErrNotExist, syscall.EINVAL, syscall.EOPNOTSUPP, enotsupp, syscall.E2BIG} {
		if errors.Is(err, lasting) {
			return true
		}
	}
	return false
}

// refusalError is loadError's one line, wrapping what the kernel answered.
type refusalError struct {
	text  string
	cause error
}

func (e *refusalError) Error() string { return e.text }
func (e *refusalError) Unwrap() error { return e.cause }

// refusals are the refusals of each program that loadFirst tried, in order.
type refusals []error

func (r refusals) Error() string {
	texts := make([]string, len(r))
	for i, err := range r {
		texts[i] = err.Error()
	}
	return strings.Join(texts, "; ")
}

func (r refusals) Unwrap() []error { return r }
