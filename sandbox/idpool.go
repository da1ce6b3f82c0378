package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// DefaultIDRange is the host ids runs get when the operator names none:
// 128 ids that fit in the 65,536 ids a user-namespaced pod maps, outside
// the ranges Debian hands to people (1000–59999) and to systemd's dynamic
// users (61184–65519), and far from nobody (65534).
const DefaultIDRange = "60000-60127"

// LocalIDRange is the host ids local runs (`harnessfacts run` as root) take
// one of each, beside a node-agent's DefaultIDRange.
const LocalIDRange = "60128-60255"

// LocalIDs are LocalIDRange's ids, locked across processes in a folder of
// root's (/run/harnessfacts/run-uids, or below the temporary folder where
// there is no /run).
func LocalIDs() (*LockedIDs, error) {
	r, err := ParseIDRange(LocalIDRange)
	if err != nil {
		return nil, err
	}
	return NewLockedIDs(r, lockDir("run-uids"))
}

// lockDir is /run/harnessfacts/NAME, or below the temporary folder where
// there is no /run.
func lockDir(name string) string {
	if st, err := os.Stat("/run"); err != nil || !st.IsDir() {
		return filepath.Join(os.TempDir(), "harnessfacts-"+name)
	}
	return filepath.Join("/run/harnessfacts", name)
}

// IDRange is a range of host ids, each used as both uid and gid of one run
// at a time, so that concurrent runs never share a uid: they cannot signal,
// ptrace or read each other's processes and do not share per-uid kernel
// limits (processes, inotify watches, keyrings).
type IDRange struct {
	First, Count int
}

// ParseIDRange parses "FIRST-LAST" (inclusive).
func ParseIDRange(s string) (IDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return IDRange{}, fmt.Errorf("id range %q: want FIRST-LAST, e.g. %s", s, DefaultIDRange)
	}
	r := IDRange{First: first, Count: last - first + 1}
	return r, r.Validate()
}

// Last is the range's last id.
func (r IDRange) Last() int { return r.First + r.Count - 1 }

func (r IDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last()) }

// Validate refuses root, nobody and ranges that are empty or leave the
// 32-bit id space.
func (r IDRange) Validate() error {
	switch {
	case r.Count < 1:
		return fmt.Errorf("id range %s is empty", r)
	case r.First < 1:
		return fmt.Errorf("id range %s holds root (0): runs must not be root", r)
	case r.Last() >= 1<<32-1:
		return fmt.Errorf("id range %s leaves the 32-bit id space", r)
	case r.First <= 65534 && r.Last() >= 65534:
		return fmt.Errorf("id range %s holds 65534 (nobody, the id unmapped files show as)", r)
	}
	return nil
}

// ErrNoFreeID is returned by Acquire when every id of the pool is in use.
var ErrNoFreeID = errors.New("sandbox: every id of the range is in use")

// IDs hands out host ids, each to one run at a time: an IDPool within one
// process (a node-agent's slots), LockedIDs across processes (local runs).
type IDs interface {
	// Range is where the ids come from.
	Range() IDRange
	// Acquire returns a free id and the function that gives it back; call
	// that only when no process of the run is left.
	Acquire() (int, func(), error)
}

// IDPool hands out the ids of a range, each to one run at a time.
type IDPool struct {
	r    IDRange
	mu   sync.Mutex
	busy map[int]bool
	next int // round robin: an id just released is the last to be reused
}

// NewIDPool checks r (and, on Linux, that every id of it is mapped in this
// process's user namespace: a user-namespaced pod maps only 65,536) and
// returns a pool over it.
func NewIDPool(r IDRange) (*IDPool, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if err := idRangeMapped(r); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return &IDPool{r: r, busy: map[int]bool{}}, nil
}

// Range is the pool's range.
func (p *IDPool) Range() IDRange { return p.r }

// Acquire returns a free id and the function that gives it back; call that
// only when no process of the run is left.
func (p *IDPool) Acquire() (int, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.r.Count {
		id := p.r.First + (p.next+i)%p.r.Count
		if !p.busy[id] {
			p.busy[id] = true
			p.next = (p.next + i + 1) % p.r.Count
			var once sync.Once
			return id, func() {
				once.Do(func() {
					p.mu.Lock()
					delete(p.busy, id)
					p.mu.Unlock()
				})
			}, nil
		}
	}
	return 0, nil, fmt.Errorf("%w (%s)", ErrNoFreeID, p.r)
}
