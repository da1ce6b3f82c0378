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

// Range is the ids' range.
func (l *LockedIDs) Range() IDRange { return l.r }

// Acquire refuses: Windows runs have no uid.
func (l *LockedIDs) Acquire() (int, func(), error) {
	return 0, nil, fmt.Errorf("%w: runs have no uid on Windows", ErrNoFreeID)
}
