package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cliBinary is the command the sandbox will start, symbolic links
// resolved, and its sha256, for the receipt. The digest is cached by path,
// size and modification time: a CLI can be hundreds of megabytes, and it
// does not change under a running node-agent unless reinstalled.
func (e *Executor) cliBinary(argv0 string, pathDirs []string) (string, string) {
	if argv0 == "" {
		return "", ""
	}
	p := argv0
	if !strings.ContainsRune(argv0, filepath.Separator) && !strings.ContainsRune(argv0, '/') {
		p = ""
		for _, dir := range append(append([]string(nil), pathDirs...), filepath.SplitList(e.opts.Path)...) {
			cand := filepath.Join(dir, argv0)
			if _, err := exec.LookPath(cand); err == nil {
				p = cand
				break
			}
		}
		if p == "" {
			return argv0, ""
		}
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return p, ""
	}
	info, err := os.Stat(resolved)
	if err != nil || !info.Mode().IsRegular() {
		return resolved, ""
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", resolved, info.Size(), info.ModTime().UnixNano())
	if d, ok := e.digests.Load(key); ok {
		return resolved, d.(string)
	}
	f, err := os.Open(resolved)
	if err != nil {
		return resolved, ""
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return resolved, ""
	}
	d := "sha256:" + hex.EncodeToString(h.Sum(nil))
	e.digests.Store(key, d)
	return resolved, d
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
