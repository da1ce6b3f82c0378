//go:build !linux

package executor

import (
	"errors"
	"fmt"
	"os"
)

// openToDigest opens the file p names to digest it, when it is a regular
// file that ok accepts (see pins_linux.go); the file read must be the one
// checked.
func openToDigest(p string, ok func(resolved string, info os.FileInfo) bool) (f *os.File, info os.FileInfo, key string, err error) {
	if info, err = os.Stat(p); err != nil {
		return nil, nil, "", err
	}
	if !info.Mode().IsRegular() || !ok(p, info) {
		return nil, nil, "", errors.New("not a file to digest")
	}
	if f, err = os.Open(p); err != nil {
		return nil, nil, "", err
	}
	again, err := f.Stat()
	if err != nil || !os.SameFile(info, again) || !again.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, "", errors.New("the file changed as it was opened")
	}
	return f, again, fmt.Sprintf("%s\x00%d\x00%d", p, again.Size(), again.ModTime().UnixNano()), nil
}

// sandboxMasks: only Linux's sandbox covers node folders so.
func sandboxMasks() []string { return nil }
