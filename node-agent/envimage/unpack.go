package envimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Bounds limit what an unpacked image may take.
type Bounds struct {
	// MaxBytes bounds the regular files' bytes together.
	MaxBytes int64
	// MaxEntries bounds the entries (files, folders, links).
	MaxEntries int
	// InFlight, when set, counts the bytes of files that every unpack in
	// progress sharing it has written: together they too stay within
	// MaxBytes (a node's runs pulling different images at once). What an
	// unpack added is in Stats.Reserved, for its caller to take back once
	// its folder is gone or in the cache.
	InFlight *atomic.Int64
}

// Stats say what Unpack wrote and what it left out.
type Stats struct {
	Entries int
	Bytes   int64
	// Inflated counts the layers' uncompressed bytes read.
	Inflated int64
	// Skipped counts the device nodes, fifos and sockets left out: the
	// sandbox has its own /dev.
	Skipped int
	// Reserved is what this unpack added to Bounds.InFlight.
	Reserved int64
}

// ErrTooLarge is returned when an image breaks its Bounds.
var ErrTooLarge = errors.New("the image is larger than the node allows")

// ErrUnsafeEntry is returned for an entry that would land outside the
// image's root.
var ErrUnsafeEntry = errors.New("the image has an entry that leaves its root")

// Unpack writes img's file system into dir, which must exist and be empty,
// applying its layers in order with their whiteouts (".wh.<name>" removes
// a lower layer's entry, ".wh..wh..opq" empties a folder of what lower
// layers put there). It does not use go-containerregistry's mutate.Extract:
// that one writes a tar's end marker before it reports an error, so a
// refused path or a layer that failed its digest check would read as a
// shorter, valid image. Each layer here is read to its end, so its digest
// is checked, and every error stops the unpack.
//
// Every write goes through an os.Root of dir, which refuses a path that
// leaves it by "..", by an absolute symbolic link or by a relative one that
// climbs out; such an entry fails the unpack with ErrUnsafeEntry rather
// than being quietly dropped. Device nodes, fifos and sockets are left out;
// setuid and setgid bits are cleared; owners are not kept (every file is
// root's, the one id the sandbox maps).
func Unpack(ctx context.Context, img v1.Image, dir string, b Bounds) (Stats, error) {
	var st Stats
	if b.MaxEntries <= 0 {
		b.MaxEntries = DefaultMaxEntries
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, err
	}
	defer root.Close()
	layers, err := img.Layers()
	if err != nil {
		return st, fmt.Errorf("its layers: %w", err)
	}
	modes := map[string]fs.FileMode{} // folders' own modes, set last
	for i, l := range layers {
		if err := unpackLayer(ctx, l, root, b, &st, modes); err != nil {
			return st, fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	// Folders get their own mode last: a read-only folder of the image
	// must still take the files below it.
	for name, mode := range modes {
		if err := root.Chmod(name, mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return st, fmt.Errorf("%s: %w", name, err)
		}
	}
	return st, nil
}

const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

func unpackLayer(ctx context.Context, l v1.Layer, root *os.Root, b Bounds, st *Stats, modes map[string]fs.FileMode) error {
	layer, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer layer.Close()
	// What the layer inflates to is bounded too, not only what is written:
	// a tar reader skips the content of a folder's or a link's header, and
	// bytes after the end marker are only read for the digest. A layer of a
	// megabyte can inflate to a gigabyte of such bytes, each one decompressed.
	rc := &inflateBound{r: layer, st: st, b: b}
	tr := tar.NewReader(rc)
	here := map[string]bool{} // what this layer wrote: an opaque marker spares it
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading it: %w", err)
		}
		st.Entries++
		if st.Entries > b.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, b.MaxEntries)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "" { // the root itself
			continue
		}
		dirName, base := path.Dir(name), path.Base(name)
		switch {
		case base == opaqueWhiteout:
			if err := emptyDir(root, dirName, name, here); err != nil {
				return unsafe(name, err)
			}
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			gone := path.Join(dirName, strings.TrimPrefix(base, whiteoutPrefix))
			if err := root.RemoveAll(gone); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return unsafe(name, err)
			}
			delete(modes, gone)
			continue
		}
		here[name] = true
		if err := writeEntry(root, tr, hdr, name, b, st, modes); err != nil {
			return err
		}
	}
	// Read to the end, so that the layer's digest is checked.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("verifying it: %w", err)
	}
	return layer.Close()
}

// inflateBound reads a layer's uncompressed stream and fails once the
// image's layers together have inflated to more than the files they wrote
// may take (Bounds.MaxBytes), a header block and its padding for each
// entry seen, and 1 MiB (a tar's end and its record's padding, 10 KiB with
// GNU tar). The count is across layers, in Stats.
type inflateBound struct {
	r  io.Reader
	st *Stats
	b  Bounds
}

// Each entry may take a 512-byte header, a PAX or GNU long-name header of
// its own with its padding: 4 KiB leaves room for long names.
const entryInflation = 4 << 10

func (r *inflateBound) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.st.Inflated += int64(n)
	if limit := r.b.MaxBytes + int64(r.st.Entries+1)*entryInflation + 1<<20; r.st.Inflated > limit {
		return n, fmt.Errorf("%w: the layers inflate to more than %d bytes, past what their %d entries and %d bytes of files take",
			ErrTooLarge, limit, r.st.Entries, r.st.Bytes)
	}
	return n, err
}

// emptyDir removes what lower layers put in dir (an opaque whiteout).
func emptyDir(root *os.Root, dir, marker string, here map[string]bool) error {
	if dir == "." {
		return fmt.Errorf("an opaque whiteout of the root")
	}
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if here[p] {
			continue
		}
		if err := root.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

func writeEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string, b Bounds, st *Stats, modes map[string]fs.FileMode) error {
	mode := fs.FileMode(hdr.Mode).Perm() // no setuid or setgid bit
	if hdr.Typeflag == tar.TypeDir && hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky // /tmp-like folders keep it: it only restricts
	}
	if hdr.Typeflag != tar.TypeDir {
		if err := mkdirAll(root, path.Dir(name)); err != nil {
			return unsafe(name, err)
		}
		// A lower layer's entry of the same name goes, folder or not.
		if err := root.RemoveAll(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return unsafe(name, err)
		}
		delete(modes, name)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
			if err := root.Remove(name); err != nil {
				return unsafe(name, err)
			}
		}
		if err := mkdirAll(root, name); err != nil {
			return unsafe(name, err)
		}
		modes[name] = mode
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old images still carry TypeRegA
		if hdr.Size < 0 || st.Bytes+hdr.Size > b.MaxBytes {
			return fmt.Errorf("%w: more than %d bytes of files (at %s)", ErrTooLarge, b.MaxBytes, name)
		}
		if b.InFlight != nil {
			if b.InFlight.Add(hdr.Size) > b.MaxBytes {
				b.InFlight.Add(-hdr.Size)
				return fmt.Errorf("%w: with the images being unpacked on this node at the same time, more than %d bytes of files (at %s); try again once they are done", ErrTooLarge, b.MaxBytes, name)
			}
			st.Reserved += hdr.Size
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return unsafe(name, err)
		}
		n, err := io.Copy(f, io.LimitReader(tr, hdr.Size))
		cerr := f.Close()
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err = errors.Join(err, cerr); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		st.Bytes += n
		if err := root.Chmod(name, mode); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	case tar.TypeSymlink:
		// The target is only text here; it is followed inside the
		// sandbox, whose root this image is, never by the node-agent (the
		// os.Root refuses to follow one out of dir).
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return unsafe(name, err)
		}
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("%w: hard link %s to %q", ErrUnsafeEntry, name, hdr.Linkname)
		}
		if err := root.Link(target, name); err != nil {
			return unsafe(name, err)
		}
	default:
		// Device nodes, fifos and sockets: the sandbox has its own /dev.
		// GNU sparse files and volume labels have no place in an image.
		st.Skipped++
	}
	return nil
}

// cleanName turns a tar entry's name into a clean path relative to the
// root ("" for the root itself). A leading "/" or "./" is dropped, as
// every image tool does; a ".." that climbs above the root is refused.
func cleanName(n string) (string, error) {
	if strings.IndexByte(n, 0) >= 0 {
		return "", fmt.Errorf("%w: a name with a NUL byte", ErrUnsafeEntry)
	}
	c := path.Clean("/" + n)
	for _, seg := range strings.Split(n, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: %q climbs out with \"..\"", ErrUnsafeEntry, n)
		}
	}
	return strings.TrimPrefix(c, "/"), nil
}

// mkdirAll makes name and its parents in root, 0755 until their own modes
// are set at the end.
func mkdirAll(root *os.Root, name string) error {
	if name == "." || name == "" {
		return nil
	}
	return root.MkdirAll(name, 0o755)
}

func unsafe(name string, err error) error {
	if strings.Contains(err.Error(), "escapes") {
		return fmt.Errorf("%w: %s: %w", ErrUnsafeEntry, name, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}
