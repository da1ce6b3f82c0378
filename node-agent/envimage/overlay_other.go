//go:build !linux

package envimage

import "errors"

// Overlay is one run's writable view of an image (Linux only).
type Overlay struct {
	// Root is the merged file system, the sandbox's root.
	Root string
}

// Mount is Linux only: environment images need bwrap and overlayfs.
func Mount(image, dir string, uid, gid int) (*Overlay, error) {
	return nil, errors.New("envimage: environment images need a Linux node (bwrap and overlayfs)")
}

// Unmount does nothing here.
func (o *Overlay) Unmount() error { return nil }
