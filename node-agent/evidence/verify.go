package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Problem is one part of the evidence that does not match.
type Problem struct {
	// Part is the file or key: receipt.json, receipt.sha256, output.log,
	// artifacts/<path> (a folder) or artifact-NN (a ConfigMap).
	Part string
	// Detail says how it differs.
	Detail string
}

func (p Problem) String() string { return p.Part + ": " + p.Detail }

// Report is what Verify found.
type Report struct {
	// Digest is the recomputed digest of the stored receipt.
	Digest string
	// Receipt is the stored receipt, when it could be read.
	Receipt *Receipt
	// Problems is empty when every digest matches.
	Problems []Problem
	// Signed is true when the evidence has a DSSE envelope.
	Signed bool
	// SignatureChecked is true when keys were given to check it against,
	// and SignedBy the ID of the trusted key whose signature verified.
	SignatureChecked bool
	SignedBy         string
}

// OK reports whether every part matched.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Err is nil when OK, else an error listing every problem.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	// The error names the first few: a folder handed over may hold any
	// number of parts the receipt does not describe, each a problem.
	var parts []string
	for i, p := range r.Problems {
		if i == maxProblemsNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(r.Problems)-i))
			break
		}
		parts = append(parts, p.String())
	}
	return fmt.Errorf("evidence does not verify: %s", strings.Join(parts, "; "))
}

// maxProblemsNamed is how many problems Err names.
const maxProblemsNamed = 5

func (r *Report) add(part, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Part: part, Detail: fmt.Sprintf(format, args...)})
}

// store is a form of evidence: a folder or a ConfigMap.
type store interface {
	// get reads a part. A part larger than limit bytes is an error and,
	// in a folder, is not read at all: a folder handed over for
	// verification may hold a sparse file of many GiB where the receipt
	// says a few bytes. The ConfigMap and pulled forms are in memory
	// already, bounded where they came from.
	get(name string, limit int64) ([]byte, bool, error)
	artifactName(i int, a Artifact) string
	// rest lists the names not in seen.
	rest(seen map[string]bool) ([]string, error)
}

// VerifyDir verifies an evidence folder. wantDigest, when not empty, is the
// digest the receipt must have (status.evidence.digest); receipt.sha256 is
// always checked too. With keys, the evidence must be signed by one of
// them (receipt.dsse.json); without, a signature present is checked for
// consistency with the receipt but not against any key.
func VerifyDir(dir, wantDigest string, keys ...*PublicKey) (*Report, error) {
	if info, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return verify(dirStore{root}, wantDigest, keys), nil
}

// VerifyConfigMap verifies the data and binaryData of an evidence ConfigMap,
// as VerifyDir a folder.
func VerifyConfigMap(data map[string]string, binaryData map[string][]byte, wantDigest string, keys ...*PublicKey) *Report {
	return verify(cmStore{data, binaryData}, wantDigest, keys)
}

func verify(s store, wantDigest string, keys []*PublicKey) *Report {
	rep := &Report{}
	seen := map[string]bool{ReceiptName: true, DigestName: true, OutputName: true, EnvelopeName: true}
	raw, ok, err := s.get(ReceiptName, MaxConfigMapBytes)
	if err != nil {
		rep.add(ReceiptName, "%v", err)
		return rep
	}
	if !ok {
		rep.add(ReceiptName, "missing")
		return rep
	}
	rep.Digest = Sum(raw)
	if wantDigest != "" && rep.Digest != wantDigest {
		rep.add(ReceiptName, "digest %s, but the run's status says %s", rep.Digest, wantDigest)
	}
	if d, ok, err := s.get(DigestName, MaxConfigMapBytes); err != nil {
		rep.add(DigestName, "%v", err)
	} else if !ok {
		rep.add(DigestName, "missing")
	} else if got := strings.TrimSpace(string(d)); got != rep.Digest {
		rep.add(DigestName, "says %s, the receipt's digest is %s", got, rep.Digest)
	}
	r, err := parseReceipt(raw)
	if err != nil {
		rep.add(ReceiptName, "%v", err)
		return rep
	}
	rep.Receipt = r
	checkEnvelope(context.Background(), rep, s, r, raw, keys)
	if out, ok, err := s.get(OutputName, partLimit(r.Output.StoredBytes)); err != nil {
		rep.add(OutputName, "%v", err)
	} else if !ok {
		rep.add(OutputName, "missing")
	} else if got := Sum(out); got != r.Output.StoredDigest || int64(len(out)) != r.Output.StoredBytes {
		rep.add(OutputName, "digest %s (%d bytes), the receipt says %s (%d bytes)", got, len(out), r.Output.StoredDigest, r.Output.StoredBytes)
	}
	if t := r.Trajectory; t != nil && t.Stored {
		seen[TrajectoryName] = true
		data, ok, err := s.get(TrajectoryName, partLimit(t.Size))
		switch {
		case err != nil:
			rep.add(TrajectoryName, "%v", err)
		case !ok:
			rep.add(TrajectoryName, "missing, the receipt says it is stored")
		case hexSum(data) != t.SHA256 || int64(len(data)) != t.Size:
			rep.add(TrajectoryName, "sha256 %s (%d bytes), the receipt says %s (%d bytes)", hexSum(data), len(data), t.SHA256, t.Size)
		}
	}
	if r.Output.StoredBytes == r.Output.Bytes && r.Output.StoredDigest != r.Output.Digest {
		rep.add(ReceiptName, "output.log is said to be whole, but its digest differs from the output's")
	}
	if len(r.Artifacts) > fixture.MaxArtifacts {
		// No node lists more (a fixture asks for at most that many): a
		// receipt that does would have each listed part read and hashed,
		// and one 800 KB folder listing one file 7,000 times was 6 GB.
		rep.add(ReceiptName, "lists %d artifacts, more than the %d a fixture may ask for: none was read", len(r.Artifacts), fixture.MaxArtifacts)
		return rep
	}
	for i, a := range r.Artifacts {
		name := s.artifactName(i, a)
		if !a.Stored {
			continue
		}
		if seen[name] {
			rep.add(name, "listed more than once in the receipt")
			continue
		}
		seen[name] = true
		data, ok, err := s.get(name, partLimit(a.Size))
		switch {
		case err != nil:
			rep.add(name, "%v", err)
		case !ok:
			rep.add(name, "missing, the receipt says it is stored")
		case hexSum(data) != a.SHA256 || int64(len(data)) != a.Size:
			rep.add(name, "sha256 %s (%d bytes), the receipt says %s (%d bytes)", hexSum(data), len(data), a.SHA256, a.Size)
		}
	}
	rest, err := s.rest(seen)
	if err != nil {
		rep.add(".", "%v", err)
	}
	for _, name := range rest {
		rep.add(name, "not part of the evidence the receipt describes")
	}
	return rep
}

// partLimit is what may be read of a part the receipt says has size
// bytes: that, and never more than a ConfigMap holds.
func partLimit(size int64) int64 { return min(max(size, 0), MaxConfigMapBytes) }

type dirStore struct{ root *os.Root }

func (d dirStore) get(name string, limit int64) ([]byte, bool, error) {
	// Refuse links: the folder could have been tampered with.
	info, err := d.root.Lstat(filepath.FromSlash(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !info.Mode().IsRegular() {
		return nil, false, fmt.Errorf("not a regular file")
	}
	if info.Size() > limit {
		return nil, false, fmt.Errorf("%d bytes, more than the %d it may have: not read", info.Size(), limit)
	}
	f, err := d.root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = f.Close() }()
	// Bounded again: the file may grow between Lstat and the read.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > limit {
		return nil, false, fmt.Errorf("more than the %d bytes it may have: not read", limit)
	}
	return b, true, nil
}

func (dirStore) artifactName(_ int, a Artifact) string { return ArtifactsDir + "/" + a.Path }

func (d dirStore) rest(seen map[string]bool) ([]string, error) {
	var out []string
	err := fs.WalkDir(d.root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		if !seen[p] {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

type cmStore struct {
	data   map[string]string
	binary map[string][]byte
}

func (c cmStore) get(name string, _ int64) ([]byte, bool, error) {
	if v, ok := c.data[name]; ok {
		return []byte(v), true, nil
	}
	v, ok := c.binary[name]
	return v, ok, nil
}

func (cmStore) artifactName(i int, _ Artifact) string { return artifactKey(i) }

func (c cmStore) rest(seen map[string]bool) ([]string, error) {
	var out []string
	for _, k := range append(sortedKeys(c.data), sortedKeys(c.binary)...) {
		if !seen[k] {
			out = append(out, k)
		}
	}
	return out, nil
}
