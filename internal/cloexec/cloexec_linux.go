package cloexec

import (
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Inherited marks every descriptor from 3 up close-on-exec. Descriptors the
// process made itself are already, so it is safe at any time and from any
// goroutine; it is meant for the start of main (or a package's init), while
// only inherited ones lack the flag.
func Inherited() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Kernels before 5.11 have no CLOSE_RANGE_CLOEXEC.
	return markEach()
}

// markEach marks each open descriptor from 3 up, as /proc/self/fd lists
// them.
func markEach() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The listing's own descriptor is gone by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return err
		}
	}
	return nil
}
