//go:build unix && !linux

package artifacts

import (
	"errors"
	"os"
	"syscall"
)

const oNonblock = syscall.O_NONBLOCK

func linkCount(_ *os.File, info os.FileInfo) (uint64, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no link count")
	}
	return uint64(st.Nlink), nil
}
