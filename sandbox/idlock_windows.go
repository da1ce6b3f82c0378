package sandbox

import (
	"errors"
	"fmt"
)

// LockedIDs has no use on Windows, whose runs have no uid.
type LockedIDs struct{ r IDRange }

// NewLockedIDs refuses: Windows runs have no uid.
func NewLockedIDs(IDRange, string) (*LockedIDs, error) {
	return nil, errors.New("sandbox: runs have no uid on Windows")
}

// NodeIDs are a node-agent's ids: on Windows, whose runs have no uid, a
// pool of the process's own, as they have always been.
func NodeIDs(r IDRange) (IDs, error) { return NewIDPool(r) }

// Range is the ids' range.
func (l *LockedIDs) Range() IDRange { return l.r }

// Acquire refuses: Windows runs have no uid.
func (l *LockedIDs) Acquire() (int, func(), error) {
	return 0, nil, fmt.Errorf("%w: runs have no uid on Windows", ErrNoFreeID)
}
