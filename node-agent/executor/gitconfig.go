package executor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/gcfg"
)

// A check that runs git in the workspace reads the repository's own
// config, which the agent wrote: a filter's clean command, diff.external,
// a textconv, a pager or an include run or change what git reports in the
// check's sandbox, where the verifier part is readable and the reward is
// written. Before each check, the workspace's repository config keeps only
// the keys that say what the repository is (gitConfigKeeps); none of them
// runs anything or changes what git compares.
//
// Only the repository at the workspace's top is known to a check without
// reading its script (the one git finds from the check's working
// directory), with the gitlinks of its index that git at the top runs
// `git status` in; another repository nested deeper is the agent's. What
// cannot be vouched for is taken away, so that a check using git fails
// rather than trusts it: a .git that is a link, or a gitdir file (or a
// commondir) that leads out of the workspace or through a link (read and
// resolved as git reads and resolves them).

// gitConfigKeeps are the config keys kept, by section (and for remote and
// branch, by subsection): lower case, as git compares them.
var gitConfigKeeps = map[string][]string{
	"core":       {"repositoryformatversion", "bare", "filemode", "symlinks", "ignorecase", "precomposeunicode", "logallrefupdates"},
	"extensions": {"objectformat", "compatobjectformat", "refstorage"},
	"remote":     {"url", "fetch", "pushurl"},
	"branch":     {"remote", "merge"},
	"user":       {"name", "email"},
	"init":       {"defaultbranch"},
}

// maxGitConfig bounds a config file read; a larger one is replaced whole.
const maxGitConfig = 1 << 20

// maxGitDirEntries bounds the entries of a git directory walked for config
// files (only its top, worktrees/ and modules/ are entered, and no data
// folder there).
const maxGitDirEntries = 20000

// minimalGitConfig replaces a config that cannot be read as git's format.
const minimalGitConfig = "[core]\n\trepositoryformatversion = 0\n"

// sanitizeGitConfig leaves the workspace's top repository with only the
// config keys that gitConfigKeeps names (see above). It returns what it
// changed, for the check's log; an error is the node's (the workspace
// could not be read or written).
func sanitizeGitConfig(workspace string) ([]string, error) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, err
	}
	defer func() { _ = root.Close() }()
	// The top repository, then each populated gitlink (submodule) of its
	// index, and theirs: `git status` or `git diff` in a check runs
	// `git status` in each with that repository's own config.
	var changed []string
	repos := []string{"."}
	// Each worktree and each git dir once: gitdir files may name one git
	// dir from many worktrees, whose index would be read again each time.
	seen := map[string]bool{}
	indexes := int64(maxGitIndexes)
	for n := 0; len(repos) > 0; n++ {
		if n > maxGitlinks {
			return changed, fmt.Errorf("over %d nested repositories", maxGitlinks)
		}
		dir := repos[0]
		repos = repos[1:]
		if seen["worktree "+dir] {
			continue
		}
		seen["worktree "+dir] = true
		did, gitdir, err := sanitizeRepo(root, dir, workspace, seen)
		changed = append(changed, did...)
		if err != nil || gitdir == "" {
			if err != nil {
				return changed, err
			}
			continue
		}
		links, err := gitlinksIn(root, gitdir, &indexes)
		if err != nil {
			return changed, err
		}
		for _, l := range links {
			p, did, err := gitlinkDir(root, dir, l)
			if did != "" {
				changed = append(changed, did)
			}
			if err != nil {
				return changed, err
			}
			if p != "" {
				repos = append(repos, p)
			}
		}
	}
	return changed, nil
}

// sanitizeRepo sanitizes the repository of the worktree dir (its .git)
// and returns its git dir ("" for none, or one already in seen).
func sanitizeRepo(root *os.Root, dir, workspace string, seen map[string]bool) ([]string, string, error) {
	once := func(gitdir string) ([]string, string, error) {
		if seen["gitdir "+gitdir] {
			return nil, "", nil
		}
		seen["gitdir "+gitdir] = true
		did, err := sanitizeGitDir(root, gitdir, workspace, seen)
		return did, gitdir, err
	}
	dotgit := path.Join(dir, ".git")
	st, err := root.Lstat(dotgit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", nil
	case err != nil:
		return nil, "", err
	case st.Mode()&fs.ModeSymlink != 0:
		return []string{"removed " + dotgit + ", a link"}, "", root.Remove(dotgit)
	case st.Mode().IsRegular():
		gitdir, ok := gitdirOf(root, dotgit, dir, workspace, true)
		if !ok {
			return []string{"removed " + dotgit + ", a gitdir file that leads out of the workspace or through a link"}, "", root.Remove(dotgit)
		}
		return once(gitdir)
	case st.IsDir():
		return once(dotgit)
	default:
		return []string{"removed " + dotgit + ", neither a folder nor a file"}, "", root.Remove(dotgit)
	}
}

// gitlinksIn returns the gitlinks of a git dir's index (and of its shared
// index, when split).
func gitlinksIn(root *os.Root, gitdir string, left *int64) ([]string, error) {
	hashLen := 20
	if b, err := readRegular(root, path.Join(gitdir, "config"), maxGitConfig); err == nil {
		_ = gcfg.ReadWithCallback(bytes.NewReader(b), func(s, _, k, v string, _ bool) error {
			if strings.EqualFold(s, "extensions") && strings.EqualFold(k, "objectformat") && strings.EqualFold(v, "sha256") {
				hashLen = 32
			}
			return nil
		})
	}
	links, shared, err := gitlinksOf(root, path.Join(gitdir, "index"), hashLen, left)
	if err != nil || shared == "" {
		return links, err
	}
	more, _, err := gitlinksOf(root, path.Join(gitdir, "sharedindex."+shared), hashLen, left)
	return append(links, more...), err
}

// readRegular reads name when it is a regular file of at most max bytes.
func readRegular(root *os.Root, name string, limit int64) ([]byte, error) {
	st, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", name, limit)
	}
	f, err := openRegular(root, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, limit))
}

// gitlinkDir returns the folder of gitlink l of the worktree dir, when it
// is one. Git follows a link on the way there (it runs `git status` in
// l, and reads l/.git), so a link on the way is removed, as a .git link is.
func gitlinkDir(root *os.Root, dir, l string) (string, string, error) {
	cur := dir
	for _, c := range strings.Split(l, "/") {
		if c == "" || c == "." || c == ".." || c == ".git" {
			return "", "", nil // no name git checks out
		}
		cur = path.Join(cur, c)
		st, err := root.Lstat(cur)
		switch {
		case err != nil:
			return "", "", nil
		case st.Mode()&fs.ModeSymlink != 0:
			return "", "removed " + cur + ", a link on the way to a gitlink", root.Remove(cur)
		case !st.IsDir():
			return "", "", nil
		}
	}
	return cur, "", nil
}

// maxGitdirFile bounds a gitdir or commondir file; a longer one is not
// vouched for (git reads it whole).
const maxGitdirFile = 64 << 10

// gitdirOf reads a gitdir file ("gitdir: PATH", gitfile true) or a
// commondir ("PATH") as git reads them, and returns PATH relative to the
// workspace, resolved from dir as git resolves it, when it stays inside the
// workspace.
func gitdirOf(root *os.Root, name, dir, workspace string, gitfile bool) (string, bool) {
	f, err := openRegular(root, name)
	if err != nil {
		return "", false
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxGitdirFile+1))
	if err != nil || len(b) > maxGitdirFile {
		return "", false
	}
	p := string(b)
	if gitfile {
		// read_gitfile_gently: the prefix, then trailing CRs and LFs dropped.
		var ok bool
		if p, ok = strings.CutPrefix(p, "gitdir: "); !ok {
			return "", false
		}
		p = strings.TrimRight(p, "\r\n")
	} else {
		// get_common_dir_noenv: the whole file, trailing LFs dropped.
		p = strings.TrimRight(p, "\n")
	}
	if p == "" || strings.ContainsAny(p, "\x00\r\n") {
		return "", false
	}
	if filepath.IsAbs(p) {
		rest, ok := strings.CutPrefix(p, workspace+"/")
		if !ok {
			return "", false
		}
		return physicalPath(root, ".", rest)
	}
	return physicalPath(root, dir, p)
}

// physicalPath resolves p from base (a folder of the workspace with no
// link on its way) component by component, and says whether it is a folder
// of the workspace reached through no link. Git resolves a ".." after a
// link where the link leads (the kernel, realpath), not by the path's
// text: a link on the way would make the two readings name different
// folders, so none is vouched for.
func physicalPath(root *os.Root, base, p string) (string, bool) {
	cur := base
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == "." {
				return "", false
			}
			cur = path.Dir(cur)
			continue
		}
		cur = path.Join(cur, c)
		if st, err := root.Lstat(cur); err != nil || st.Mode()&fs.ModeSymlink != 0 {
			return "", false
		}
	}
	if st, err := root.Lstat(cur); err != nil || !st.IsDir() {
		return "", false
	}
	return cur, true
}

// sanitizeGitDir sanitizes every config file of a git directory (its
// own, a worktree's, its submodules'), and of its commondir.
func sanitizeGitDir(root *os.Root, gitdir, workspace string, seen map[string]bool) ([]string, error) {
	var changed []string
	dirs := []string{gitdir}
	if st, err := root.Lstat(path.Join(gitdir, "commondir")); err == nil {
		common, ok := "", st.Mode().IsRegular()
		if ok {
			common, ok = gitdirOf(root, path.Join(gitdir, "commondir"), gitdir, workspace, false)
		}
		if !ok {
			changed = append(changed, "removed "+path.Join(gitdir, "commondir")+", which leads out of the workspace or through a link")
			if err := root.Remove(path.Join(gitdir, "commondir")); err != nil {
				return changed, err
			}
		} else if !seen["gitdir "+common] {
			seen["gitdir "+common] = true
			dirs = append(dirs, common)
		}
	}
	for _, d := range dirs {
		did, err := sanitizeConfigsIn(root, d)
		changed = append(changed, did...)
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// gitConfigNames are the files of a git dir that git reads as config.
var gitConfigNames = []string{"config", "config.worktree"}

// sanitizeConfigsIn sanitizes the config files of the git dir d: at its
// top (looked up by name: the top may hold any number of other files),
// and in its worktrees/ and modules/ (submodules' git dirs, nested),
// listed a few entries at a time, at most maxGitDirEntries, entering no
// data folder (objects, references, logs, LFS or annex content).
func sanitizeConfigsIn(root *os.Root, d string) ([]string, error) {
	var changed []string
	sanitize := func(p string) error {
		did, err := sanitizeGitConfigFile(root, p)
		if did != "" {
			changed = append(changed, did)
		}
		return err
	}
	var pending []string
	for _, n := range gitConfigNames {
		if st, err := root.Lstat(path.Join(d, n)); err == nil && !st.IsDir() {
			if err := sanitize(path.Join(d, n)); err != nil {
				return changed, err
			}
		}
	}
	for _, n := range []string{"worktrees", "modules"} {
		if st, err := root.Lstat(path.Join(d, n)); err == nil && st.IsDir() {
			pending = append(pending, path.Join(d, n))
		}
	}
	entries := 0
	for len(pending) > 0 {
		dir := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		f, err := root.Open(dir)
		if err != nil {
			return changed, err
		}
		for {
			es, err := f.ReadDir(256)
			for _, e := range es {
				if entries++; entries > maxGitDirEntries {
					_ = f.Close()
					return changed, fmt.Errorf("git directory %s holds over %d entries in its worktrees and modules", d, maxGitDirEntries)
				}
				p := path.Join(dir, e.Name())
				switch {
				case e.IsDir() && !gitDataDirs[e.Name()]:
					pending = append(pending, p)
				case !e.IsDir() && slices.Contains(gitConfigNames, e.Name()):
					if err := sanitize(p); err != nil {
						_ = f.Close()
						return changed, err
					}
				}
			}
			if err != nil {
				_ = f.Close()
				if errors.Is(err, io.EOF) {
					break
				}
				return changed, err
			}
		}
	}
	return changed, nil
}

// gitDataDirs are a git dir's folders that hold data, never a config.
var gitDataDirs = map[string]bool{"objects": true, "refs": true, "logs": true, "lfs": true, "annex": true, "rr-cache": true, "reftable": true}

// sanitizeGitConfigFile rewrites one config file with the keys kept; a
// link is replaced by a file (what it led to is not changed).
func sanitizeGitConfigFile(root *os.Root, name string) (string, error) {
	st, err := root.Lstat(name)
	if err != nil {
		return "", err
	}
	var in []byte
	if st.Mode().IsRegular() {
		f, err := openRegular(root, name)
		if err != nil {
			return "", err
		}
		in, err = io.ReadAll(io.LimitReader(f, maxGitConfig+1))
		_ = f.Close()
		if err != nil {
			return "", err
		}
	}
	// Written as read here even when nothing is dropped, so that git
	// reads what this parser read, never a construct the two parse apart.
	out, dropped := keptGitConfig(in)
	if !st.Mode().IsRegular() {
		out = []byte(minimalGitConfig)
	}
	if st.Mode().IsRegular() && bytes.Equal(in, out) {
		return "", nil
	}
	tmp := name + ".harnessfacts"
	_ = root.Remove(tmp)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	_, err = f.Write(out)
	if err == nil {
		// The agent's (the slot's) file, as it was: a check's git may
		// write the config.
		err = sameOwner(f, st)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return "", err
	}
	if !st.Mode().IsRegular() {
		return fmt.Sprintf("replaced %s, not a regular file, by a minimal config", name), nil
	}
	if dropped < 0 {
		return fmt.Sprintf("replaced %s, which is not git's config format or is over 1 MiB, by a minimal config", name), nil
	}
	if dropped == 0 {
		return "", nil
	}
	return fmt.Sprintf("dropped %d keys from %s", dropped, name), nil
}

// keptGitConfig is the config in with only the keys gitConfigKeeps names,
// and how many were dropped (-1: in is not git's config format, and the
// minimal config is returned).
func keptGitConfig(in []byte) ([]byte, int) {
	if len(in) > maxGitConfig {
		return []byte(minimalGitConfig), -1
	}
	var out bytes.Buffer
	dropped := 0
	var section, sub string
	header := false
	err := gcfg.ReadWithCallback(bytes.NewReader(in), func(s, ss, k, v string, blank bool) error {
		if k == "" {
			return nil // a section's header alone
		}
		s, k = strings.ToLower(s), strings.ToLower(k)
		keep := false
		for _, name := range gitConfigKeeps[s] {
			keep = keep || name == k
		}
		// remote and branch keys live in a subsection (a name); the others
		// in the section itself. A name or value with a control character
		// is no name git writes.
		if keep && (ss != "") != (s == "remote" || s == "branch") ||
			strings.ContainsFunc(ss+v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			keep = false
		}
		if !keep {
			dropped++
			return nil
		}
		if !header || s != section || ss != sub {
			section, sub, header = s, ss, true
			if ss == "" {
				fmt.Fprintf(&out, "[%s]\n", s)
			} else {
				fmt.Fprintf(&out, "[%s %s]\n", s, quoteGitConfig(ss))
			}
		}
		if blank {
			fmt.Fprintf(&out, "\t%s\n", k)
		} else {
			fmt.Fprintf(&out, "\t%s = %s\n", k, quoteGitConfig(v))
		}
		return nil
	})
	if err != nil {
		return []byte(minimalGitConfig), -1
	}
	return out.Bytes(), dropped
}

// quoteGitConfig quotes a subsection name or a value as git reads them.
func quoteGitConfig(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
