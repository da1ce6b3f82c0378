package evidence

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/harnessfacts/harnessfacts/node-agent/artifacts"
)

// Names of the parts, as files in a folder and as ConfigMap keys.
const (
	ReceiptName = "receipt.json"
	DigestName  = "receipt.sha256"
	OutputName  = "output.log"
	// TrajectoryName is the run's conversation in ATIF.
	TrajectoryName = "trajectory.json"
	// ArtifactsDir holds the artifacts in a folder, under their paths.
	ArtifactsDir = "artifacts"
	// artifactKeyPrefix + the artifact's index in the receipt is its
	// ConfigMap key (artifact paths may hold characters keys cannot).
	artifactKeyPrefix = "artifact-"
)

// MaxConfigMapBytes is the size every ConfigMap form stays within: the API
// server's 1 MiB object limit less room for metadata and key names.
const MaxConfigMapBytes = 1<<20 - 64<<10

// minLog is how much of the output log is kept before artifacts are dropped.
const minLog = 64 << 10

// Bundle is sealed evidence: a receipt and the parts it vouches for, within
// a size bound.
type Bundle struct {
	// Receipt is the receipt, with digests and Dropped filled in.
	Receipt Receipt
	// ReceiptJSON is its canonical bytes and Digest their sha256.
	ReceiptJSON []byte
	Digest      string
	// Output is output.log as stored (possibly shortened).
	Output []byte
	// Trajectory is trajectory.json as stored (nil when there is none or
	// it was left out to fit).
	Trajectory []byte
	// Artifacts holds the stored contents by path.
	Artifacts map[string][]byte
	// Statement is the in-toto statement of the receipt (sign.go), and
	// Envelope its signed DSSE envelope once Sign was called (nil before:
	// the evidence is then unsigned).
	Statement []byte
	Envelope  []byte
}

// Log is an output log Seal digests and shortens without holding it whole
// (a spool of up to limits.maxOutputBytes).
type Log interface {
	// Size is the log's length in bytes.
	Size() int64
	// Digest is "sha256:<hex>" of the whole log.
	Digest() (string, error)
	// Head and Tail return its first and last n bytes.
	Head(n int) ([]byte, error)
	Tail(n int) ([]byte, error)
}

// BytesLog is a Log held in memory.
type BytesLog []byte

// Size is len(b).
func (b BytesLog) Size() int64 { return int64(len(b)) }

// Digest is Sum(b).
func (b BytesLog) Digest() (string, error) { return Sum(b), nil }

// Head returns the first n bytes.
func (b BytesLog) Head(n int) ([]byte, error) { return b[:min(max(n, 0), len(b))], nil }

// Tail returns the last n bytes.
func (b BytesLog) Tail(n int) ([]byte, error) { return b[len(b)-min(max(n, 0), len(b)):], nil }

// Parts are what a receipt vouches for besides itself.
type Parts struct {
	// Output is the redacted output log.
	Output Log
	// Trajectory is the sealed (bounded, redacted) trajectory.json with its
	// format and step count; nil for none.
	Trajectory       []byte
	TrajectoryFormat string
	TrajectorySteps  int
	// Artifacts are the collected, redacted artifacts.
	Artifacts []artifacts.Result
}

// SealLog is SealParts of an output log and artifacts.
func SealLog(r Receipt, output Log, arts []artifacts.Result, maxBytes int) (*Bundle, error) {
	return SealParts(r, Parts{Output: output, Artifacts: arts}, maxBytes)
}

// SealParts fills the receipt's output, trajectory and artifact parts from
// the redacted output, trajectory and artifacts, shortens what must be
// shortened so the whole stays within maxBytes (MaxConfigMapBytes when 0) —
// first the log down to 64 KiB (its head and tail are kept), then the
// trajectory, then artifact contents, largest first, keeping their digests
// — records that in Receipt.Dropped, and computes the digest. r's other
// fields (run, digests, timings, ...) are the caller's. Every part must
// already be redacted. At most maxBytes of the log is ever read into
// memory.
func SealParts(r Receipt, parts Parts, maxBytes int) (*Bundle, error) {
	output, arts := parts.Output, parts.Artifacts
	if maxBytes <= 0 {
		maxBytes = MaxConfigMapBytes
	}
	r.Schema = Schema
	r.Timings.Started = r.Timings.Started.UTC()
	r.Timings.Finished = r.Timings.Finished.UTC()
	digest, err := output.Digest()
	if err != nil {
		return nil, err
	}
	r.Output.Digest = digest
	r.Output.Bytes = output.Size()
	r.Artifacts = make([]Artifact, len(arts))
	r.Dropped = nil
	b := &Bundle{Artifacts: map[string][]byte{}}
	r.Trajectory = nil
	if parts.Trajectory != nil {
		r.Trajectory = &Trajectory{Format: parts.TrajectoryFormat, Steps: parts.TrajectorySteps,
			Size: int64(len(parts.Trajectory)), SHA256: hexSum(parts.Trajectory), Stored: true}
		b.Trajectory = parts.Trajectory
	}
	if b.Output, err = shorten(output, maxBytes); err != nil {
		return nil, err
	}
	if int64(len(b.Output)) < output.Size() {
		r.Dropped = setNote(r.Dropped, "output.log: ", fmt.Sprintf("output.log: %d of %d bytes kept (head and tail)", len(b.Output), output.Size()))
	}
	for i, a := range arts {
		r.Artifacts[i] = Artifact{Path: a.Path, Size: a.Size, SHA256: a.SHA256, Rejected: a.Rejected, Stored: a.Rejected == "" && !a.NotKept}
		if a.NotKept {
			r.Dropped = append(r.Dropped, fmt.Sprintf("artifacts/%s: content not kept (beyond what the node-agent holds for a run's artifacts), digest kept", a.Path))
		}
		if r.Artifacts[i].Stored {
			if a.SHA256 != hexSum(a.Data) {
				return nil, fmt.Errorf("artifact %s: its digest does not match its content", a.Path)
			}
			b.Artifacts[a.Path] = a.Data
		}
	}
	// Shrink until it fits: the log down to minLog, then artifacts, then
	// the log down to nothing.
	for step := 0; ; step++ {
		r.Output.StoredDigest = Sum(b.Output)
		r.Output.StoredBytes = int64(len(b.Output))
		if err := normalize(&r); err != nil {
			return nil, err
		}
		raw, err := r.Canonical()
		if err != nil {
			return nil, err
		}
		stmt, err := statement(&r, raw)
		if err != nil {
			return nil, err
		}
		if err := selfCheck(&r, raw, stmt); err != nil {
			return nil, err
		}
		// Room for the signed envelope is kept whether or not it is signed.
		size := len(raw) + len(b.Output) + len(DigestName) + 71 +
			len(EnvelopeName) + base64.StdEncoding.EncodedLen(len(stmt)) + envelopeRoom
		for _, d := range b.Artifacts {
			size += len(d)
		}
		size += len(b.Trajectory)
		if size <= maxBytes {
			b.Receipt, b.ReceiptJSON, b.Digest, b.Statement = r, raw, Sum(raw), stmt
			return b, nil
		}
		over := size - maxBytes + 256 // room for the note about it
		switch {
		case len(b.Output) > minLog:
			keep := max(minLog, len(b.Output)-over)
			if b.Output, err = shorten(output, keep); err != nil {
				return nil, err
			}
			r.Dropped = setNote(r.Dropped, "output.log: ", fmt.Sprintf("output.log: %d of %d bytes kept (head and tail)", len(b.Output), output.Size()))
		case b.Trajectory != nil:
			b.Trajectory = nil
			r.Trajectory.Stored = false
			r.Dropped = append(r.Dropped, TrajectoryName+": left out to fit, digest kept")
		case len(b.Artifacts) > 0:
			largest := ""
			for _, p := range sortedKeys(b.Artifacts) {
				if largest == "" || len(b.Artifacts[p]) > len(b.Artifacts[largest]) {
					largest = p
				}
			}
			for i := range r.Artifacts {
				if r.Artifacts[i].Path == largest {
					r.Artifacts[i].Stored = false
				}
			}
			delete(b.Artifacts, largest)
			r.Dropped = append(r.Dropped, fmt.Sprintf("artifacts/%s: content left out to fit, digest kept", largest))
		case len(b.Output) > 0:
			if b.Output, err = shorten(output, max(0, len(b.Output)-over)); err != nil {
				return nil, err
			}
			r.Dropped = setNote(r.Dropped, "output.log: ", fmt.Sprintf("output.log: %d of %d bytes kept (head and tail)", len(b.Output), output.Size()))
		default:
			return nil, fmt.Errorf("the receipt alone is %d bytes, more than the %d allowed", len(raw), maxBytes)
		}
		if step > 10000 {
			return nil, errors.New("evidence does not shrink to fit")
		}
	}
}

// shorten keeps n bytes of the log: a quarter from the head, the rest from
// the tail (where an agent's outcome usually is), joined by a marker.
func shorten(l Log, n int) ([]byte, error) {
	size := l.Size()
	if size <= int64(n) {
		b, err := l.Head(int(size))
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), b...), nil
	}
	marker := fmt.Sprintf("\n[... %d bytes left out of the evidence ...]\n", size-int64(n))
	if n <= len(marker) {
		return nil, nil
	}
	n -= len(marker)
	head, err := l.Head(n / 4)
	if err != nil {
		return nil, err
	}
	tail, err := l.Tail(n - n/4)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, n+len(marker))
	out = append(out, head...)
	out = append(out, marker...)
	return append(out, tail...), nil
}

func setNote(notes []string, prefix, note string) []string {
	for i, n := range notes {
		if strings.HasPrefix(n, prefix) {
			notes[i] = note
			return notes
		}
	}
	return append(notes, note)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// WriteDir writes the evidence as a folder: receipt.json, receipt.sha256,
// receipt.dsse.json when signed, output.log, trajectory.json when there
// is one and artifacts/<path>. dir must not exist yet or be empty; no
// existing file is ever overwritten. The folders it makes are its
// caller's alone (0700): the artifacts are a task's answers, which another
// run's agent must not copy.
func (b *Bundle) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if entries, err := os.ReadDir(dir); err != nil {
		return err
	} else if len(entries) > 0 {
		return fmt.Errorf("evidence folder %s is not empty", dir)
	}
	write := func(rel string, data []byte) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		return errors.Join(err, f.Close())
	}
	if err := write(ReceiptName, b.ReceiptJSON); err != nil {
		return err
	}
	if err := write(DigestName, []byte(b.Digest+"\n")); err != nil {
		return err
	}
	if err := write(OutputName, b.Output); err != nil {
		return err
	}
	if b.Envelope != nil {
		if err := write(EnvelopeName, b.Envelope); err != nil {
			return err
		}
	}
	if b.Trajectory != nil {
		if err := write(TrajectoryName, b.Trajectory); err != nil {
			return err
		}
	}
	for _, a := range b.Receipt.Artifacts {
		if !a.Stored {
			continue
		}
		if !validRel(a.Path) {
			return fmt.Errorf("artifact path %q is not a clean relative path", a.Path)
		}
		if err := write(ArtifactsDir+"/"+a.Path, b.Artifacts[a.Path]); err != nil {
			return err
		}
	}
	return nil
}

// ConfigMapData is the evidence as a ConfigMap's data and binaryData:
// receipt.json and receipt.sha256, receipt.dsse.json when signed,
// output.log, and artifact-NN for the
// stored artifacts (NN: the index in receipt.artifacts). Content that is
// not valid UTF-8, or that a YAML parser refuses (yamlText), goes to
// binaryData.
func (b *Bundle) ConfigMapData() (data map[string]string, binaryData map[string][]byte) {
	data = map[string]string{ReceiptName: string(b.ReceiptJSON), DigestName: b.Digest}
	binaryData = map[string][]byte{}
	put := func(k string, v []byte) {
		if yamlText(v) {
			data[k] = string(v)
		} else {
			binaryData[k] = v
		}
	}
	put(OutputName, b.Output)
	if b.Trajectory != nil {
		put(TrajectoryName, b.Trajectory)
	}
	if b.Envelope != nil {
		data[EnvelopeName] = string(b.Envelope)
	}
	for i, a := range b.Receipt.Artifacts {
		if a.Stored {
			put(artifactKey(i), b.Artifacts[a.Path])
		}
	}
	if len(binaryData) == 0 {
		binaryData = nil
	}
	return data, binaryData
}

func artifactKey(i int) string { return fmt.Sprintf("%s%02d", artifactKeyPrefix, i) }

// validRel says whether p is a clean, slash-separated relative name of a
// file in an evidence folder, as this system names files: on Windows, a
// reserved device name (CON, NUL, COM1…) or a colon (an alternate data
// stream) is refused too (filepath.IsLocal), for it would not name a file
// of the folder there.
func validRel(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || !filepath.IsLocal(filepath.FromSlash(p)) {
		return false
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}

// normalize makes every string of the receipt valid UTF-8 (an invalid byte
// becomes U+FFFD), as the receipt reads back: encoding/json writes an
// invalid byte as the escape \ufffd and reads it back as the character,
// which it then writes as itself, so a receipt holding one (a check's
// output that is not UTF-8, or cut inside a character) was sealed and
// signed but never in canonical form when verified.
func normalize(r *Receipt) error {
	b, err := r.Canonical()
	if err != nil {
		return err
	}
	var n Receipt
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*r = n
	return nil
}

// selfCheck verifies the receipt and its statement as Verify will, before
// they are sealed: evidence that its own verifier refuses must not be
// signed and stored as a run's record (a field normalize does not cover,
// a number the statement cannot carry exactly).
func selfCheck(r *Receipt, raw, stmt []byte) error {
	if _, err := parseReceipt(raw); err != nil {
		return fmt.Errorf("the sealed receipt would not verify: %w", err)
	}
	var rep Report
	checkStatement(&rep, stmt, r, raw)
	if err := rep.Err(); err != nil {
		return fmt.Errorf("the sealed receipt's statement would not verify: %w", err)
	}
	return nil
}

// yamlText reports whether v, as a ConfigMap's data, keeps the object
// printable by `kubectl get -o yaml`: valid UTF-8 without DEL, a C1
// control other than U+0085, U+FFFE or U+FFFF. kubectl converts the
// object's JSON with a YAML parser, which refuses those; JSON escapes the
// other controls (ESC among them) but not these. An output log with an
// 8-bit CSI (U+009B) or a DEL in data made the evidence ConfigMap, and
// every ConfigMap list of its namespace, fail to print ("yaml: control
// characters are not allowed"). In binaryData it is base64, which every
// parser takes; readers look in both (FromConfigMap, VerifyConfigMap).
func yamlText(v []byte) bool {
	for i := 0; i < len(v); {
		r, n := utf8.DecodeRune(v[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return false
		case r == 0x7f, r >= 0x80 && r <= 0x9f && r != 0x85, r == 0xfffe, r == 0xffff:
			return false
		}
		i += n
	}
	return true
}
