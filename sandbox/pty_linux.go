package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MaxPtys is how many pseudo-terminals one sandbox may hold at once.
//
// bwrap's --dev gives a sandbox a devpts instance of its own, with no
// bound of its own: every instance but the node's first draws on one
// count for the whole kernel, kernel.pty.max less kernel.pty.reserve
// (4096 − 1024 by default), which every other sandbox and every
// container of the node (each runtime gives its containers their own
// instance, and `kubectl exec -t` one of its ptys) shares. An agent under
// 256 MiB and 16 processes opened /dev/ptmx 3,071 times and held them
// for its whole episode: meanwhile no other sandbox or container of the
// node could open one (ENOSPC), and the run passed. A CLI takes one or a
// few at a time (a shell tool's terminal).
const MaxPtys = 64

// ptyInstance is a devpts instance of at most MaxPtys ptys, bound over
// the sandbox's /dev/pts (bwrap's /dev/ptmx is the link pts/ptmx, so it
// is this instance's), mounted with bwrap's own options. It needs
// CAP_SYS_ADMIN (the node-agent, `harnessfacts run` as root): a caller
// that may not mount gets nil, and its sandboxes keep bwrap's unbounded
// instance, as before.
//
// The mount is made private at once, so that its unmount reaches no other
// mount namespace (a sandbox in its setup holds a copy of every mount);
// its folder is made in Spec.PtsIn, which the caller removes when no
// sandbox of its is starting, or, without one, in the system's temporary
// folder and removed by remove.
type ptyInstance struct {
	dir   string
	rmdir bool
}

func newPtyInstance(in string) (*ptyInstance, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	dir, err := os.MkdirTemp(in, "harnessfacts-pts-")
	if err != nil {
		return nil, fmt.Errorf("a folder for the sandbox's ptys: %w", err)
	}
	p := &ptyInstance{dir: dir, rmdir: in == ""}
	opts := fmt.Sprintf("newinstance,ptmxmode=0666,mode=620,max=%d", MaxPtys)
	if err := unix.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		_ = os.Remove(dir)
		if errors.Is(err, unix.EPERM) {
			return nil, nil // no CAP_SYS_ADMIN here
		}
		return nil, fmt.Errorf("mounting the sandbox's devpts (%s) on %s: %w", opts, dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		_ = p.remove()
		return nil, fmt.Errorf("making the sandbox's devpts %s private: %w", dir, err)
	}
	return p, nil
}

// remove unmounts the instance (its ptys are gone with the sandbox's
// processes; a descriptor still held elsewhere keeps it until closed) and
// removes its folder when the runner made it where no caller removes it.
func (p *ptyInstance) remove() error {
	if err := unix.Unmount(p.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting the sandbox's devpts %s: %w", p.dir, err)
	}
	if !p.rmdir {
		return nil
	}
	if err := os.Remove(p.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the sandbox's devpts folder: %w", err)
	}
	return nil
}
