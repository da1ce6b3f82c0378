package artifacts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// openPortable opens rel beneath workspace refusing every symbolic link (or
// Windows reparse point) on the way: each component is checked with Lstat,
// the file is opened through an os.Root (which cannot leave the workspace)
// without blocking, and the opened file must be the one that was checked,
// so a swap between the check and the open is refused too.
func openPortable(workspace, rel string) (*os.File, error) {
	if err := refuseLinks(workspace, rel); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	name := filepath.FromSlash(rel)
	before, err := root.Lstat(name)
	if err != nil {
		return nil, notFound(err)
	}
	if !before.Mode().IsRegular() {
		// Do not even open it: opening a FIFO or device can block or act.
		return nil, reject("not a regular file (%s)", kind(before.Mode()))
	}
	f, err := root.OpenFile(name, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, notFound(err)
	}
	after, err := f.Stat()
	if err != nil || !os.SameFile(before, after) {
		f.Close()
		return nil, reject("changed while being collected")
	}
	return f, nil
}

// refuseLinks walks the workspace and each component of rel with Lstat and
// refuses a link anywhere.
func refuseLinks(workspace, rel string) error {
	info, err := os.Lstat(workspace)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return reject("the workspace folder is not a directory (%s)", kind(info.Mode()))
	}
	parts := strings.Split(rel, "/")
	cur := workspace
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		info, err := os.Lstat(cur)
		if err != nil {
			return notFound(err)
		}
		// Windows reports junctions and other reparse points as irregular.
		link := info.Mode()&fs.ModeSymlink != 0 || (info.Mode()&fs.ModeIrregular != 0 && i < len(parts)-1)
		if link {
			if i < len(parts)-1 {
				return reject("the folder %q is a symbolic link: links are not followed", strings.Join(parts[:i+1], "/"))
			}
			return reject("a symbolic link: links are not followed")
		}
		if i < len(parts)-1 && !info.IsDir() {
			return reject("%q is not a directory", strings.Join(parts[:i+1], "/"))
		}
	}
	return nil
}

func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return reject("missing: the agent did not create it")
	}
	return err
}
