//go:build !linux

package sandbox

// Preparer keeps sandboxes made ahead; only Linux's cgroup v1 hosts have
// anything to win from it.
type Preparer struct{}

// NewPreparer returns nil: there is nothing to prepare on this OS.
func NewPreparer(Options, string, int, func(error)) *Preparer { return nil }

// Err is always nil here.
func (*Preparer) Err() error { return nil }

// Close does nothing here.
func (*Preparer) Close() error { return nil }
