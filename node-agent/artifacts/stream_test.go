package artifacts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// upper is a stand-in redactor with fixed memory.
type upper struct {
	w   io.Writer
	buf []byte
}

func (u *upper) Write(p []byte) (int, error) {
	u.buf = append(u.buf[:0], p...)
	for i, c := range u.buf {
		if c >= 'a' && c <= 'z' {
			u.buf[i] = c - 32
		}
	}
	return u.w.Write(u.buf)
}
func (*upper) Close() error { return nil }

// Artifacts of up to maxArtifactBytes each are read once, streamed: the
// node-agent keeps at most Options.Keep of them in memory, whatever the run
// allows, and still reports the digest of each.
func TestCollectStreamsLargeArtifacts(t *testing.T) {
	ws := t.TempDir()
	big := bytes.Repeat([]byte("abcdefgh"), 4<<20) // 32 MiB
	must(t, os.WriteFile(filepath.Join(ws, "big"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "small"), []byte("token-xyz here"), 0o644))
	raw := map[string]*bytes.Buffer{}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := Collect(ws, []string{"small", "big"}, Options{
		MaxBytes:     64 << 20,
		Keep:         1 << 20,
		RedactWriter: func(w io.Writer) io.WriteCloser { return &upper{w: w} },
		Raw: func(p string) io.Writer {
			if p == "small" {
				raw[p] = &bytes.Buffer{}
				return raw[p]
			}
			return io.Discard
		},
	})
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("collecting a 32 MiB artifact allocated %d MiB", grew>>20)
	}
	if res[0].Rejected != "" || string(res[0].Data) != "TOKEN-XYZ HERE" || res[0].NotKept {
		t.Errorf("small: %+v", res[0])
	}
	if raw["small"].String() != "token-xyz here" {
		t.Errorf("Raw saw %q, want the content before redaction", raw["small"])
	}
	sum := sha256.Sum256(bytes.ToUpper(big))
	if r := res[1]; r.Rejected != "" || !r.NotKept || r.Data != nil || r.Size != int64(len(big)) || r.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("big: rejected %q, notKept %v, %d bytes kept, size %d, sha %s", r.Rejected, r.NotKept, len(r.Data), r.Size, r.SHA256)
	}
}
