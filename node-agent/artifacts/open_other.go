//go:build !linux

package artifacts

import "os"

// openBeneath is the portable walk on systems without openat2.
func openBeneath(workspace, rel string) (*os.File, error) { return openPortable(workspace, rel) }
