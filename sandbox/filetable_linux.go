package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The node's open-file table (fs.file-max) is one count for every process
// of the node: once it is full, no process without CAP_SYS_ADMIN opens a
// file, a pipe or a socket (ENFILE), the other runs' agents and the node's
// unprivileged services included. What bounds a run's open files is its
// memory limit: each one holds a struct file (192 bytes on 6.x amd64) in
// the run's memory cgroup, and a file mapped and closed holds it without a
// descriptor, so no descriptor limit bounds them. The kernel's default
// file-max is about one file per 10 KiB of memory, so without systemd, which
// raises it to the most the kernel allows at boot, a run with about 2 % of
// the node's memory can fill it.
var (
	fileMaxPath = "/proc/sys/fs/file-max"
	meminfoPath = "/proc/meminfo"
)

// fileBytes is the least memory one open file holds in its run's memory
// cgroup: its struct file and its descriptor's slot.
const fileBytes = 200

// MaxFileTable is what systemd sets fs.file-max to (the kernel's most,
// LONG_MAX), and what RaiseFileTable raises it to.
const MaxFileTable = 1<<63 - 1

// fileTableDescription is the preflight's words on the node's open-file
// table: "" when no run can fill it (the node's memory holds fewer open
// files than fs.file-max allows), else why one can, loudly. Unreadable
// values are said as such, not taken for a bound.
func fileTableDescription() string {
	fileMax, err := readUint64(fileMaxPath)
	if err != nil {
		return fmt.Sprintf("%s (fs.file-max unreadable: %v)", NoFileTableBound, err)
	}
	mem, err := memTotal()
	if err != nil {
		return fmt.Sprintf("%s (the node's memory unreadable: %v)", NoFileTableBound, err)
	}
	return fileTableVerdict(fileMax, mem)
}

func fileTableVerdict(fileMax, memTotal uint64) string {
	if fileMax >= memTotal/fileBytes {
		return ""
	}
	return fmt.Sprintf("%s (fs.file-max %d: a run with more than %d MiB of memory can fill the node's open-file table, "+
		"and then no unprivileged process of the node opens a file; raise it as systemd does, sysctl fs.file-max=%d, "+
		"which the node-agent does itself unless --protect-kernel-defaults)", NoFileTableBound, fileMax, fileMax*fileBytes>>20, uint64(MaxFileTable))
}

// RaiseFileTable raises fs.file-max to MaxFileTable where one run could
// fill the node's open-file table, as systemd does at boot and as the
// kubelet sets the kernel's tunables it needs; the node-agent calls it at
// start (unless --protect-kernel-defaults). It returns the value before and
// after; before == after when nothing was needed or it could not be written
// (a user-namespaced pod's /proc/sys is read-only: err says so, and the
// preflight's verdict then names the missing bound).
func RaiseFileTable() (before, after uint64, err error) {
	before, err = readUint64(fileMaxPath)
	if err != nil {
		return 0, 0, fmt.Errorf("fs.file-max: %w", err)
	}
	mem, err := memTotal()
	if err != nil {
		return before, before, fmt.Errorf("the node's memory: %w", err)
	}
	if fileTableVerdict(before, mem) == "" {
		return before, before, nil
	}
	if err := os.WriteFile(fileMaxPath, []byte(strconv.FormatUint(MaxFileTable, 10)+"\n"), 0); err != nil {
		return before, before, fmt.Errorf("raising fs.file-max: %w", err)
	}
	after, err = readUint64(fileMaxPath)
	if err != nil {
		return before, before, fmt.Errorf("fs.file-max: %w", err)
	}
	return before, after, nil
}

func readUint64(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// memTotal is the node's memory in bytes (/proc/meminfo's MemTotal).
func memTotal() (uint64, error) {
	b, err := os.ReadFile(meminfoPath)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseUint(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("%s has no MemTotal in kB", meminfoPath)
}
