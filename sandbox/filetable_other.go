//go:build !linux

package sandbox

// MaxFileTable is Linux's: elsewhere there is no fs.file-max to raise.
const MaxFileTable = 1<<63 - 1

// RaiseFileTable does nothing: the open-file table it raises is Linux's.
func RaiseFileTable() (before, after uint64, err error) { return 0, 0, nil }
