package executor

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// maxGitlinks bounds the gitlinks (submodules) sanitized in one workspace.
const maxGitlinks = 1000

// gitlinksOf returns the paths of the gitlink entries (mode 160000) of a
// git index, read as a stream (v2, v3 and v4; hashLen 20 for SHA-1, 32
// for SHA-256), and the hex name of its shared index when it is split.
// `git status` and `git diff` run `git status` in each populated gitlink
// with that repository's own config.
//
// The index is the agent's: a FIFO there held the node-agent in open(2)
// for good, and a sparse file of exabytes (no byte of the run's disk)
// with an empty extension header after another kept it reading zeros
// forever, before a check that never came, deaf to the run's end. Only a
// regular file of at most maxGitIndex bytes is read, no further than its
// size, and no entry count it cannot hold; left is what the indexes of
// one workspace may still hold together (a thousand sparse indexes of a
// gigabyte each held it for hours before each check). The file is opened
// without blocking and judged again once open: the agent's code (an
// earlier check's, or a process left in the plain fallback) may swap a
// FIFO in after the Lstat.
func gitlinksOf(root *os.Root, name string, hashLen int, left *int64) (links []string, shared string, err error) {
	st, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	if !st.Mode().IsRegular() {
		return nil, "", fmt.Errorf("index %s: not a regular file", name)
	}
	if st.Size() > maxGitIndex {
		return nil, "", fmt.Errorf("index %s: %d bytes, over %d", name, st.Size(), int64(maxGitIndex))
	}
	if st.Size() > *left {
		return nil, "", fmt.Errorf("index %s: the workspace's git indexes hold more than %d bytes together", name, int64(maxGitIndexes))
	}
	*left -= st.Size()
	f, err := openRegular(root, name)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(io.LimitReader(f, st.Size()))
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, "", fmt.Errorf("index %s: %w", name, err)
	}
	version, count := binary.BigEndian.Uint32(hdr[4:8]), binary.BigEndian.Uint32(hdr[8:12])
	if string(hdr[:4]) != "DIRC" || version < 2 || version > 4 {
		return nil, "", fmt.Errorf("index %s: not an index git reads", name)
	}
	// Every entry takes at least its fixed part and a name's NUL.
	if uint64(count)*uint64(40+hashLen+2+1) > uint64(st.Size()) {
		return nil, "", fmt.Errorf("index %s: %d entries in %d bytes", name, count, st.Size())
	}
	fixed := make([]byte, 40+hashLen+2)
	var prev []byte
	for range count {
		if _, err := io.ReadFull(r, fixed); err != nil {
			return nil, "", fmt.Errorf("index %s: %w", name, err)
		}
		size := len(fixed)
		mode := binary.BigEndian.Uint32(fixed[24:28])
		if flags := binary.BigEndian.Uint16(fixed[40+hashLen:]); flags&0x4000 != 0 && version >= 3 {
			if _, err := r.Discard(2); err != nil {
				return nil, "", fmt.Errorf("index %s: %w", name, err)
			}
			size += 2
		}
		var entry []byte
		if version == 4 {
			strip, err := binary.ReadUvarint(r)
			if err != nil || strip > uint64(len(prev)) {
				return nil, "", fmt.Errorf("index %s: a name not git's", name)
			}
			suffix, err := readName(r)
			if err != nil {
				return nil, "", fmt.Errorf("index %s: %w", name, err)
			}
			// A name is its predecessor's kept part and a suffix: bounded
			// as a whole, or names growing by each entry's suffix would
			// hold count × 64 KiB.
			if len(prev)-int(strip)+len(suffix) > maxIndexName {
				return nil, "", fmt.Errorf("index %s: an entry name over %d bytes", name, maxIndexName)
			}
			entry = append(prev[:len(prev)-int(strip):len(prev)-int(strip)], suffix...)
		} else {
			if entry, err = readName(r); err != nil {
				return nil, "", fmt.Errorf("index %s: %w", name, err)
			}
			// NUL padding: 1 to 8 bytes, the one readName took among them.
			if _, err := r.Discard(7 - (size+len(entry))%8); err != nil {
				return nil, "", fmt.Errorf("index %s: %w", name, err)
			}
		}
		prev = entry
		if mode == 0o160000 {
			if len(links) == maxGitlinks {
				return nil, "", fmt.Errorf("index %s: over %d gitlinks", name, maxGitlinks)
			}
			links = append(links, string(entry))
		}
	}
	// Extensions: a split index names its shared part.
	for {
		var ext [8]byte
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			break // the trailing hash, or the end
		}
		n := binary.BigEndian.Uint32(ext[4:])
		// Git stops at a signature it does not know unless it starts
		// with an upper-case letter (an optional extension).
		if (ext[0] < 'A' || ext[0] > 'Z') && string(ext[:4]) != "link" && string(ext[:4]) != "sdir" {
			break
		}
		if string(ext[:4]) == "link" {
			oid := make([]byte, hashLen)
			if n < uint32(hashLen) {
				return nil, "", fmt.Errorf("index %s: a link extension not git's", name)
			}
			if _, err := io.ReadFull(r, oid); err != nil {
				return nil, "", fmt.Errorf("index %s: %w", name, err)
			}
			if !bytes.Equal(oid, make([]byte, hashLen)) {
				shared = hex.EncodeToString(oid)
			}
			n -= uint32(hashLen)
		}
		if _, err := r.Discard(int(n)); err != nil {
			break
		}
	}
	return links, shared, nil
}

// maxGitIndex bounds the index read: git's index for a few million files
// is a few hundred megabytes.
const maxGitIndex = 1 << 30

// maxIndexName bounds an index entry's name (git's paths are at most
// PATH_MAX, 4 KiB, on Linux).
const maxIndexName = 64 << 10

// readName reads a NUL-terminated entry name, at most maxIndexName bytes.
func readName(r *bufio.Reader) ([]byte, error) {
	var b []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		if c == 0 {
			return b, nil
		}
		if b = append(b, c); len(b) > maxIndexName {
			return nil, errors.New("an entry name over 64 KiB")
		}
	}
}

// maxGitIndexes bounds what the indexes of one workspace hold together,
// read before each check: half of maxGitIndex, the index of some five
// million files (reading that many zeros takes about two seconds here).
const maxGitIndexes = maxGitIndex / 2

// openRegular opens name for reading without blocking (a FIFO swapped in
// after a check of its type would hold open(2) for good) and returns it
// only if what was opened is a regular file.
func openRegular(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return f, nil
}
