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
	// hashed or kept (for example (*redact.Redactor).Bytes). It needs the
	// whole content in memory: prefer RedactWriter.
	Redact func([]byte) []byte
	// RedactWriter, when set, wraps the writer the content streams into, so
	// that what is hashed and kept is redacted (for example
	// (*redact.Redactor).NewWriter). It wins over Redact.
	RedactWriter func(io.Writer) io.WriteCloser
	// Raw, when set, returns a writer that sees an artifact's content as it
	// is in the workspace, before redaction (the run's MCP token watcher).
	Raw func(path string) io.Writer
	// Keep bounds the redacted content kept in memory, over all artifacts
	// together (DefaultKeep when 0): an artifact that does not fit is still
	// hashed, streamed, but its Data is nil and NotKept is set. Whatever
	// maxArtifactBytes a run asks (up to 1 GiB each), the node-agent holds
	// no more than this.
	Keep int64
}

// DefaultKeep is Options.Keep's default: about what the evidence
// ConfigMap can hold.
const DefaultKeep = 1 << 20

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
	// Redacted is true when Redact changed the content (Redact only).
	Redacted bool
	// NotKept is true when the content was hashed but not kept (Keep).
	NotKept bool
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
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	keep := opts.Keep
	out := make([]Result, 0, len(paths))
	for _, p := range paths {
		r := Result{Path: p}
		var err error
		if opts.RedactWriter != nil || opts.Redact == nil {
			err = stream(&r, workspace, p, opts, open, &keep)
		} else {
			var data []byte
			if data, err = collectOne(workspace, p, opts.MaxBytes, open); err == nil {
				if opts.Raw != nil {
					_, _ = opts.Raw(p).Write(data)
				}
				red := opts.Redact(data)
				r.Redacted = string(red) != string(data)
				sum := sha256.Sum256(red)
				r.Data, r.Size, r.SHA256 = red, int64(len(red)), hex.EncodeToString(sum[:])
			}
		}
		if err != nil {
			r = Result{Path: p, Rejected: reason(err)}
		}
		out = append(out, r)
	}
	return out
}

// stream reads one artifact once: raw bytes to opts.Raw, then through the
// redactor into the hash, the size count and, while *keep allows, memory.
func stream(r *Result, workspace, rel string, opts Options, open opener, keep *int64) error {
	f, err := openChecked(workspace, rel, opts.MaxBytes, open)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	kept := &keptBuffer{room: *keep}
	counted := &counter{}
	sink := io.MultiWriter(h, counted, kept)
	var red io.WriteCloser = nopCloser{sink}
	if opts.RedactWriter != nil {
		red = opts.RedactWriter(sink)
	}
	src := io.LimitReader(f, opts.MaxBytes+1)
	if opts.Raw != nil {
		src = io.TeeReader(src, opts.Raw(rel))
	}
	n, err := io.Copy(red, src)
	if cerr := red.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n > opts.MaxBytes {
		return reject("too large: grew past maxArtifactBytes (%d) while being read", opts.MaxBytes)
	}
	r.Size, r.SHA256 = counted.n, hex.EncodeToString(h.Sum(nil))
	if kept.over {
		r.NotKept = true
	} else {
		r.Data = kept.b
		if r.Data == nil {
			r.Data = []byte{}
		}
		*keep -= int64(len(kept.b))
	}
	return nil
}

type keptBuffer struct {
	b    []byte
	room int64
	over bool
}

func (k *keptBuffer) Write(p []byte) (int, error) {
	if !k.over {
		if int64(len(k.b)+len(p)) > k.room {
			k.over, k.b = true, nil
		} else {
			k.b = append(k.b, p...)
		}
	}
	return len(p), nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

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
	f, err := openChecked(workspace, rel, limit, open)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, reject("too large: grew past maxArtifactBytes (%d) while being read", limit)
	}
	return data, nil
}

// openChecked opens rel beneath the workspace and checks it is a regular
// file with one link, within limit.
func openChecked(workspace, rel string, limit int64, open opener) (*os.File, error) {
	if err := checkRel(rel); err != nil {
		return nil, err
	}
	f, err := open(workspace, rel)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = reject("not a regular file (%s)", kind(info.Mode()))
	}
	var links uint64
	if err == nil {
		links, err = linkCount(f, info)
	}
	if err == nil && links != 1 {
		err = reject("has %d hard links: only files with a single link are collected", links)
	}
	if err == nil && info.Size() > limit {
		err = reject("too large: %d bytes, more than maxArtifactBytes (%d)", info.Size(), limit)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
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
