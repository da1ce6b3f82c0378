//go:build windows

package artifacts

import (
	"os"

	"golang.org/x/sys/windows"
)

// oNonblock has no meaning on Windows (no FIFOs in the file system).
const oNonblock = 0

// linkCount asks the handle: os.FileInfo on Windows has no link count.
func linkCount(f *os.File, _ os.FileInfo) (uint64, error) {
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(windows.Handle(f.Fd()), &fi); err != nil {
		return 0, err
	}
	return uint64(fi.NumberOfLinks), nil
}
