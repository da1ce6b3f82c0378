//go:build unix

package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// LockedIDs hands out the ids of a range across processes: an id is a
// run's while the run holds an exclusive lock on the file named after it
// in a folder only root may write. Each `harnessfacts run` is a process of
// its own, and two at once must not share a uid: a run dir is closed to
// every group but its run's, so a run that shares another's uid could read
// its verifier part and reach its sockets. The lock goes with the process,
// however it ends; the files stay, empty (removing one could let two
// processes lock two different files of one name).
type LockedIDs struct {
	r   IDRange
	dir string
}

// NewLockedIDs checks r as NewIDPool does and makes dir (0700) for the
// locks.
func NewLockedIDs(r IDRange, dir string) (*LockedIDs, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := idRangeMapped(r); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: the folder of the uid locks: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: the folder of the uid locks: %w", err)
	}
	// Ours, and no one else's to write: in a temporary folder another
	// user could have made it first, and locked every id.
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || st.Mode().Perm()&0o022 != 0 || !ok || int(sys.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("sandbox: the folder of the uid locks %s is not a folder of this user's that only it may write", dir)
	}
	return &LockedIDs{r: r, dir: dir}, nil
}

// NodeIDs are a node-agent's ids (its --run-uids), locked across processes
// as LocalIDs are, in a folder of their own: a node-agent's are each one
// run's alone on the machine, not only in its process (two node-agents of
// one machine, as tests run them, never hand out one id at once), so that
// whatever runs as a run's uid when it ends is the run's (KillUIDs).
func NodeIDs(r IDRange) (IDs, error) {
	ids, err := NewLockedIDs(r, lockDir("node-uids"))
	if err != nil {
		// A /run this process may not write (the chart's pod: a
		// read-only root file system, its /tmp an emptyDir of its own).
		if ids2, err2 := NewLockedIDs(r, filepath.Join(os.TempDir(), "harnessfacts-node-uids")); err2 == nil {
			return ids2, nil
		}
		return nil, err
	}
	return ids, nil
}

// Range is the ids' range.
func (l *LockedIDs) Range() IDRange { return l.r }

// Acquire locks a free id, trying them from a random one on.
func (l *LockedIDs) Acquire() (int, func(), error) {
	start := rand.IntN(l.r.Count)
	for i := range l.r.Count {
		id := l.r.First + (start+i)%l.r.Count
		f, err := os.OpenFile(filepath.Join(l.dir, strconv.Itoa(id)), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("sandbox: locking uid %d: %w", id, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return 0, nil, fmt.Errorf("sandbox: locking uid %d: %w", id, err)
		}
		var once sync.Once
		return id, func() { once.Do(func() { _ = f.Close() }) }, nil
	}
	return 0, nil, fmt.Errorf("%w (%s, locked in %s)", ErrNoFreeID, l.r, l.dir)
}
