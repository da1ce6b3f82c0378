package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinkHops is how many links one path may go through, as the kernel's
// limit (40) for a path it resolves.
const maxLinkHops = 40

// maxLinksNamed bounds how many refused links a check's message names.
const maxLinksNamed = 3

// maxLinkSteps bounds the path components the scan of one workspace
// follows, a few seconds of lstat(2): each link may take 40 hops of 4 KiB
// of "a/../" each, and a workspace hundreds of thousands of links to such
// a chain (hours, before each check). A workspace whose links take more is
// not judged, and its checks do not run; pnpm's node_modules of a large
// monorepo takes well under a million.
const maxLinkSteps = 4 << 20

// stepsSpent is the reason resolveFrom gives when the scan's steps ran out.
const stepsSpent = "steps spent"

// linksOutOfReach finds the symbolic links of the workspace that a check
// would follow to what the agent never had: into the run dir outside the
// workspace and the agent's own home and temp folders (the fixture's
// folder, which holds fixture.yaml and the verifier part only while the
// checks run, and the checks' own folders), or through /proc (a check's
// open descriptors: /proc/self/fd/3, /dev/fd/3, /dev/stdin). A link
// `answer.txt -> ../fixture/tests/expected.txt` made by an agent that
// never saw the expected answer passed `cmp answer.txt
// "$HARNESSFACTS_TESTS/expected.txt"`; so did one that reached it through
// a link to `/`, and `answer.txt -> /dev/fd/3` for a check that had the
// expected answer open as its descriptor 3.
//
// Each link is resolved on the node as the check's sandbox resolves it:
// without an environment image, the sandbox shows the node's root, and the
// run dir's folders at their own paths; what it shows differently (/proc,
// /dev's descriptor links, which lead into /proc) is refused as a whole.
// It returns one line per such link, at most maxLinksNamed, and how many
// there were.
func linksOutOfReach(runDir, workspace string, allowed []string) ([]string, int, error) {
	// Compared with where the links physically lead: the run root may
	// itself lie behind a link of the node.
	runDir, workspace = physical(runDir), physical(workspace)
	ok := make([]string, len(allowed))
	for i, a := range allowed {
		ok[i] = physical(a)
	}
	allowed = ok
	var found []string
	n := 0
	steps := maxLinkSteps
	err := walkBatched(workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != workspace && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			// Not judged is not allowed: a folder deeper than
			// PATH_MAX from / (ENAMETOOLONG here) is still reached by
			// a check that goes down to it step by step, and so is
			// every link in it.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // its path may be thousands of bytes
			}
			rel, _ := filepath.Rel(workspace, p)
			if len(rel) > 64 {
				return fmt.Errorf("a folder %d bytes deep in the workspace: %w", len(rel), err)
			}
			return fmt.Errorf("%q: %w", rel, err)
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		// The walk entered only folders (it follows no link) from the
		// physical workspace, so the link's folder is physical already:
		// it is resolved from there, not again from the root (a score of
		// system calls a link; a workspace may hold millions of them).
		to, why := resolveFrom(filepath.Dir(p), []string{d.Name()}, runDir, workspace, allowed, &steps)
		if why == stepsSpent {
			return fmt.Errorf("its links take more than %d steps to follow", maxLinkSteps)
		}
		if why == "" {
			return nil
		}
		n++
		if len(found) < maxLinksNamed {
			rel, _ := filepath.Rel(workspace, p)
			found = append(found, fmt.Sprintf("%q leads to %s (%s)", rel, to, why))
		}
		return nil
	})
	return found, n, err
}

// resolveAsCheck follows the link at p, component by component as the
// kernel does, and says why a check must not follow it ("" when it may).
func resolveAsCheck(p, runDir, workspace string, allowed []string) (string, string) {
	steps := maxLinkSteps
	return resolveFrom("/", components(p), runDir, workspace, allowed, &steps)
}

// resolveFrom is resolveAsCheck of the path todo names from the physical
// folder cur, each component one of steps.
func resolveFrom(cur string, todo []string, runDir, workspace string, allowed []string, steps *int) (string, string) {
	hops := 0
	for len(todo) > 0 {
		if *steps--; *steps < 0 {
			return "", stepsSpent
		}
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		if under(next, "/proc") {
			return next, "a check's own processes and descriptors"
		}
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			// Missing from here on: what is left is taken as named.
			cur = filepath.Join(append([]string{next}, todo...)...)
			todo = nil
			break
		}
		if err != nil {
			// What cannot be followed here may still be followed by
			// the check's kernel: a path over PATH_MAX (ENAMETOOLONG)
			// is one the kernel never builds, as it resolves a link
			// from the folder it is in.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return fmt.Sprintf("a path %d bytes long", len(next)), "a link the node-agent could not follow as a check would: " + err.Error()
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", "" // the check's kernel says ELOOP too
		}
		t, err := os.Readlink(next)
		if err != nil {
			return next, "a link the node-agent could not read: " + err.Error()
		}
		if filepath.IsAbs(t) {
			cur = "/"
		}
		todo = append(components(t), todo...)
	}
	if under(cur, "/proc") {
		return cur, "a check's own processes and descriptors"
	}
	if !under(cur, runDir) || under(cur, workspace) {
		return "", ""
	}
	for _, a := range allowed {
		if under(cur, a) {
			return "", ""
		}
	}
	rel, _ := filepath.Rel(runDir, cur)
	if rel == "." {
		return "the run dir", "the folder of the run's own files"
	}
	return "the run dir's " + rel, "out of the workspace, into the run's own files (the fixture's verifier part, the checks' folders)"
}

// physical is p with every link resolved, or p as it is if that fails.
func physical(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func components(p string) []string { return strings.Split(p, "/") }

// under says whether p is dir or below it (both clean and absolute).
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// refuseLinksOutOfReach is linksOutOfReach as a check's reason not to run.
func refuseLinksOutOfReach(runDir, workspace string, allowed []string) error {
	found, n, err := linksOutOfReach(runDir, workspace, allowed)
	if err != nil {
		return fmt.Errorf("the workspace could not be searched for links: %w", err)
	}
	if n == 0 {
		return nil
	}
	more := ""
	if n > len(found) {
		more = fmt.Sprintf(" and %d more", n-len(found))
	}
	return fmt.Errorf("the workspace holds %d symbolic link(s) that a check would follow to what the agent never had: %s%s",
		n, strings.Join(found, "; "), more)
}

// walkBatched is filepath.WalkDir without its whole listing of each folder
// in memory (WalkDir reads and sorts every entry of a folder first: a
// million names the agent made held the node-agent's memory past its
// bound): a folder's entries are read a few at a time, in the folder's
// order, following no link. fn is called as WalkDir calls it, with no
// fs.SkipDir support beyond returning an error.
func walkBatched(root string, fn fs.WalkDirFunc) error {
	info, err := os.Lstat(root)
	if err != nil {
		return fn(root, nil, err)
	}
	return walkDir(root, fs.FileInfoToDirEntry(info), fn)
}

func walkDir(p string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(p, d, nil); err != nil || !d.IsDir() {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fn(p, d, err)
	}
	defer f.Close()
	for {
		es, err := f.ReadDir(256)
		for _, e := range es {
			if werr := walkDir(filepath.Join(p, e.Name()), e, fn); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fn(p, d, err)
		}
	}
}
