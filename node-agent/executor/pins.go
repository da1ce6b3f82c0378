package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// cliView is where the sandbox finds a command: the adapter's CLI folders
// (the node's, bound in), then PATH's folders, which are the node's or,
// in an environment image, the image's (inside Root); a relative path
// with a slash is the working directory's (the workspace).
type cliView struct {
	pathDirs []string
	path     []string
	root     string // the environment image's merged root; "" for the node
	workdir  string
}

// cliBinary is the command the sandbox will start, as the sandbox sees it
// (symbolic links resolved), and its sha256, for the receipt. The command
// is the run author's to name: a file is digested only when the sandbox
// could read it too (readable by all, not under /proc, /sys or /dev), so
// that the digest of a file only root reads (/etc/shadow, the
// node-agent's own /proc/self/environ) is no oracle in the receipt, and a
// pseudo-file that never ends (/proc/kmsg) holds nothing. A node file's
// digest is cached by its path and version (on Linux its inode and change
// time, which its owner cannot set back as it can its modification time):
// a CLI can be hundreds of megabytes, and it does not change under a
// running node-agent unless reinstalled.
func (e *Executor) cliBinary(argv0 string, v cliView) (string, string) {
	if argv0 == "" {
		return "", ""
	}
	shown, host, onNode := v.find(argv0)
	if host == "" {
		return shown, ""
	}
	// The checks are of the file opened, and the file read is the one
	// checked (openToDigest): a folder or link on the way swapped between
	// the two would have the node-agent digest a file no check saw.
	f, _, key, err := openToDigest(host, func(resolved string, info os.FileInfo) bool {
		if info.Mode().Perm()&0o004 == 0 || info.Size() > maxCLIDigestBytes {
			return false
		}
		if onNode {
			return e.allMayRead(resolved, v.pathDirs)
		}
		return within(resolved, v.root) || within(resolved, v.workdir)
	})
	if err != nil {
		return shown, ""
	}
	defer func() { _ = f.Close() }()
	if onNode {
		if d, ok := e.digests.Load(key); ok {
			return shown, d.(string)
		}
	}
	// A file that grows as it is read (its owner appending) is read no
	// further than the bound either.
	h := sha256.New()
	if n, err := io.Copy(h, io.LimitReader(f, maxCLIDigestBytes+1)); err != nil || n > maxCLIDigestBytes {
		return shown, ""
	}
	d := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if onNode {
		// The image's and the workspace's files are the run's: caching
		// them would keep a key for every run.
		e.digests.Store(key, d)
	}
	return shown, d
}

// maxCLIDigestBytes bounds the file digested for the receipt: a CLI is at
// most a few hundred megabytes, and a run author naming a node's log of
// gigabytes as its command would have the node-agent read all of it.
const maxCLIDigestBytes = 2 << 30

// within says whether p (resolved) is base's or in it, base as given or
// with its own links resolved; never for base "".
func within(p, base string) bool {
	return underAny(p, forms(base))
}

// forms are base as given and with its links resolved (as given only,
// when it does not exist); none for "".
func forms(base string) []string {
	if base == "" {
		return nil
	}
	f := []string{filepath.Clean(base)}
	if r, err := filepath.EvalSymlinks(base); err == nil && r != f[0] {
		f = append(f, r)
	}
	return f
}

// underAny says whether p is one of bases or in it.
func underAny(p string, bases []string) bool {
	return slices.ContainsFunc(bases, func(b string) bool { return under(p, b) })
}

// allMayRead says whether any user of the node could read the node's file
// p (resolved, absolute), and the sandbox too: every folder on its way
// searchable by all, and not in what the sandbox hides (the run root, the
// node-agent's own folders, the node's socket and workload folders that
// every sandbox covers, unless in one of the CLI folders bound over them)
// nor a pseudo-file (/proc, /sys, /dev). A file readable by all in a
// private folder is no one's to digest for a run. Each folder is compared
// as given and with its links resolved, as p is (the hidden
// /var/run/secrets is /run/secrets on most nodes).
func (e *Executor) allMayRead(p string, cliDirs []string) bool {
	hidden, masked := e.nodeHidden()
	if underAny(p, hidden) {
		return false
	}
	if underAny(p, masked) && !slices.ContainsFunc(cliDirs, func(d string) bool { return within(p, d) }) {
		return false
	}
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// nodeHidden are the folders allMayRead refuses, and those it refuses
// outside the CLI folders, each in both forms: resolved once, not at each
// run's start (a score of folders, each a few system calls).
func (e *Executor) nodeHidden() (hidden, masked []string) {
	e.hiddenOnce.Do(func() {
		for _, h := range append([]string{"/proc", "/sys", "/dev", e.opts.RunRoot}, e.opts.Hidden...) {
			e.hidden = append(e.hidden, forms(h)...)
		}
		for _, m := range e.masked {
			e.maskedForms = append(e.maskedForms, forms(m)...)
		}
	})
	return e.hidden, e.maskedForms
}

// find resolves argv0 as the sandbox would: the path the sandbox shows,
// the file on the host ("" when there is none), and whether it is the
// node's own (not the image's, nor the workspace's).
func (v cliView) find(argv0 string) (shown, host string, onNode bool) {
	// inRoot is name's file inside root, links resolved there.
	inRoot := func(root, name string) (string, string, bool) {
		p, err := securejoin.SecureJoin(root, name)
		if err != nil {
			return name, "", false
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || !filepath.IsLocal(rel) {
			return name, "", false
		}
		return "/" + filepath.ToSlash(rel), p, true
	}
	onNodeFile := func(name string) (string, string, bool) {
		p, err := filepath.EvalSymlinks(name)
		if err != nil {
			return name, "", false
		}
		return p, p, true
	}
	executable := func(p string) bool { _, err := exec.LookPath(p); return err == nil }
	switch {
	case !strings.ContainsRune(argv0, '/') && !strings.ContainsRune(argv0, filepath.Separator):
		for _, dir := range v.pathDirs {
			if cand := filepath.Join(dir, argv0); executable(cand) {
				s, h, ok := onNodeFile(cand)
				return s, h, ok
			}
		}
		for _, dir := range v.path {
			if !filepath.IsAbs(dir) {
				continue
			}
			if v.root == "" {
				if cand := filepath.Join(dir, argv0); executable(cand) {
					s, h, ok := onNodeFile(cand)
					return s, h, ok
				}
				continue
			}
			if s, h, ok := inRoot(v.root, filepath.Join(dir, argv0)); ok && executable(h) {
				return s, h, false
			}
		}
		return argv0, "", false
	case !filepath.IsAbs(argv0):
		if v.workdir == "" {
			return argv0, "", false
		}
		_, h, ok := inRoot(v.workdir, argv0)
		if !ok {
			return argv0, "", false
		}
		rel, _ := filepath.Rel(v.workdir, h)
		return filepath.Join(v.workdir, rel), h, false
	case v.root != "" && !slices.ContainsFunc(v.pathDirs, func(d string) bool { return strings.HasPrefix(argv0, d+"/") }):
		s, h, ok := inRoot(v.root, argv0)
		if !ok {
			return argv0, "", false
		}
		return s, h, false
	default:
		s, h, ok := onNodeFile(argv0)
		return s, h, ok
	}
}

// endpoint is a provider URL as the receipt may show it: no user info,
// query or fragment, where a credential could hide.
func endpoint(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	u.User, u.RawQuery, u.Fragment, u.RawFragment, u.ForceQuery = nil, "", "", "", false
	return u.String()
}
