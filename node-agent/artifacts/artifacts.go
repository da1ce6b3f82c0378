// Package artifacts collects the files a fixture asked for from a run's
// workspace, safely: only the requested paths, resolved beneath the
// workspace without following any symbolic link (openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS on Linux; elsewhere, and where the
// kernel lacks openat2, a walk that refuses every link and checks the opened
// file is the one it walked to), regular files with a single hard link only,
// opened without blocking (a FIFO is refused, not waited on), bounded in size.
//
// The workspace was written by the agent, so nothing in it is trusted: not
// its files, not its folders, not the workspace folder itself.
package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Options bound a collection.
type Options struct {
	// MaxBytes bounds each artifact (the run's limits.maxArtifactBytes); a
	// larger file is rejected. Required: 0 rejects every non-empty file.
	MaxBytes int64
	// Redact, when set, is applied to each artifact's content before it is
	// hashed or kept (for example (*redact.Redactor).Bytes).
	Redact func([]byte) []byte
}

// Result is one requested artifact, collected or rejected.
type Result struct {
	// Path is the requested workspace-relative path.
	Path string
	// Data is the (redacted) content, when collected.
	Data []byte
	// Size is len(Data).
	Size int64
	// SHA256 is the hex sha256 of Data, when collected.
	SHA256 string
	// Redacted is true when Redact changed the content.
	Redacted bool
	// Rejected says why the artifact was not collected; empty when it was.
	Rejected string
}

// Status is the result as status.artifacts[] wants it.
func (r Result) Status() v1alpha1.ArtifactResult {
	return v1alpha1.ArtifactResult{Path: r.Path, Size: r.Size, SHA256: r.SHA256, Rejected: r.Rejected}
}

// Collect collects each requested path from the workspace folder, in the
// order given. It never fails as a whole: each problem is a Result's
// Rejected reason.
func Collect(workspace string, paths []string, opts Options) []Result {
	return collect(workspace, paths, opts, openBeneath)
}

// opener opens rel beneath the workspace without following links, or
// returns a *rejection.
type opener func(workspace, rel string) (*os.File, error)

func collect(workspace string, paths []string, opts Options, open opener) []Result {
	out := make([]Result, 0, len(paths))
	for _, p := range paths {
		r := Result{Path: p}
		data, err := collectOne(workspace, p, opts.MaxBytes, open)
		if err != nil {
			r.Rejected = reason(err)
		} else {
			if opts.Redact != nil {
				red := opts.Redact(data)
				r.Redacted = string(red) != string(data)
				data = red
			}
			sum := sha256.Sum256(data)
			r.Data, r.Size, r.SHA256 = data, int64(len(data)), hex.EncodeToString(sum[:])
		}
		out = append(out, r)
	}
	return out
}

// rejection is a reason an artifact is not collected.
type rejection struct{ msg string }

func (r *rejection) Error() string { return r.msg }

func reject(format string, args ...any) error { return &rejection{msg: fmt.Sprintf(format, args...)} }

// reason turns an error into a status reason of at most 512 bytes.
func reason(err error) string {
	var rj *rejection
	msg := err.Error()
	if errors.As(err, &rj) {
		msg = rj.msg
	} else {
		msg = "cannot be read: " + msg
	}
	if len(msg) > 512 {
		msg = msg[:509] + "..."
	}
	return msg
}

func collectOne(workspace, rel string, limit int64, open opener) ([]byte, error) {
	if err := checkRel(rel); err != nil {
		return nil, err
	}
	f, err := open(workspace, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, reject("not a regular file (%s)", kind(info.Mode()))
	}
	links, err := linkCount(f, info)
	if err != nil {
		return nil, err
	}
	if links != 1 {
		return nil, reject("has %d hard links: only files with a single link are collected", links)
	}
	if info.Size() > limit {
		return nil, reject("too large: %d bytes, more than maxArtifactBytes (%d)", info.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, reject("too large: grew past maxArtifactBytes (%d) while being read", limit)
	}
	return data, nil
}

// checkRel refuses a path that is not a clean relative path beneath the
// workspace, before touching the file system.
func checkRel(p string) error {
	if p == "" {
		return reject("empty path")
	}
	if strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.Contains(p, ":") {
		return reject("outside the workspace: only relative slash-separated paths are collected")
	}
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "..":
			return reject("outside the workspace: the path has a '..' segment")
		case "", ".":
			return reject("not a clean path: empty or '.' segment")
		}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return reject("not a clean path: NUL byte")
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "an irregular file"
	}
}
