package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// rootTargets resolves, inside a Spec.Root, the path of every mount bwrap
// makes there, as the sandbox itself will resolve it once it runs: an
// absolute link relative to the root, no link leaving it.
//
// bwrap does not: it creates its mount points and mounts on them under
// /newroot, following links as its setup root sees them, where /oldroot is
// the node's root and /newroot the sandbox's. The root is an image's
// overlay, whose links are the image author's, and for the checks the
// links the agent left there, root inside. A link /tests -> /oldroot/var/tmp
// had bwrap make folders on the node; /tests -> /newroot/x had the check's
// /tests show what the agent put at /newroot/x, not the verifier part
// bound there. Resolved here, each mount lands where the sandbox will look
// for it, through real folders only (nothing else writes the root while a
// sandbox starts: the run's earlier processes are gone).
//
// A link may move a mount, but not onto, into or over another one (the
// reward folder bound over the workspace, the tests into a folder the
// agent may write): the relation of every two resolved targets must be
// the one their paths have, or the sandbox is refused. A target below
// another one (a path masked inside a bound folder) lies in that folder,
// not in the root: it moves with it.
//
// The result maps each target that moved to where it is mounted.
func rootTargets(root string, targets []string) (map[string]string, error) {
	uniq := slices.Clone(targets)
	for i, t := range uniq {
		uniq[i] = filepath.Clean(t)
	}
	// Shorter paths first: a target's enclosing one is resolved before it.
	slices.SortFunc(uniq, func(a, b string) int { return len(a) - len(b) })
	uniq = slices.Compact(uniq)
	resolved := make(map[string]string, len(uniq))
	for _, t := range uniq {
		if t == "/" {
			return nil, &RootError{"sandbox: a mount on the root's / itself"}
		}
		if parent := enclosing(t, uniq); parent != "" {
			resolved[t] = filepath.Join(resolved[parent], strings.TrimPrefix(t, parent))
			continue
		}
		p, err := securejoin.SecureJoin(root, t)
		if err != nil {
			return nil, &RootError{fmt.Sprintf("sandbox: resolving %s in the root: %v", t, err)}
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, &RootError{fmt.Sprintf("sandbox: the root's links lead %s to its top: nothing may be mounted over the whole root", t)}
		}
		resolved[t] = "/" + rel
	}
	for i, a := range uniq {
		for _, b := range uniq[i+1:] {
			if relation(a, b) != relation(resolved[a], resolved[b]) {
				return nil, &RootError{fmt.Sprintf("sandbox: the root's links lead %s to %s and %s to %s: a link may not move a mount onto, into or over another one", a, resolved[a], b, resolved[b])}
			}
		}
	}
	moved := map[string]string{}
	for t, r := range resolved {
		if r != t {
			moved[t] = r
		}
	}
	return moved, nil
}

// enclosing returns the longest of targets strictly above t, or "".
func enclosing(t string, targets []string) string {
	best := ""
	for _, o := range targets {
		if o != t && len(o) > len(best) && within(t, o) {
			best = o
		}
	}
	return best
}

// relation says how a and b lie: 0 apart, 1 the same, 2 a below b, 3 b
// below a.
func relation(a, b string) int {
	switch {
	case a == b:
		return 1
	case within(a, b):
		return 2
	case within(b, a):
		return 3
	}
	return 0
}

// rootMounts lists the paths bwrapArgs mounts on inside a Spec.Root, in
// its order.
func rootMounts(spec Spec) []string {
	t := []string{"/dev", "/proc", "/tmp"}
	t = append(t, spec.ReadOnly...)
	t = append(t, spec.ReadWrite...)
	for _, b := range spec.BindAt {
		t = append(t, b.Target)
	}
	t = append(t, innerHidden(spec, nil)...)
	if spec.Network == NetworkUserMode {
		t = append(t, "/etc/resolv.conf")
	}
	return t
}
