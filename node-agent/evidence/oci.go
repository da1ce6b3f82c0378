package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Evidence as an OCI artifact, the way signatures and SBOMs are kept in
// registries: an image manifest of artifactType ArtifactType whose layers
// are the evidence's files, each named by its
// org.opencontainers.image.title annotation (as ORAS names files), so that
// the evidence outlives its run and its ConfigMap.
const (
	// ArtifactType is the manifest's artifactType and config media type.
	ArtifactType = "application/vnd.harnessfacts.evidence.v1+json"
	// ReceiptMediaType is receipt.json's layer media type.
	ReceiptMediaType = "application/vnd.harnessfacts.receipt.v1+json"
	// EnvelopeMediaType is receipt.dsse.json's (DSSE's own).
	EnvelopeMediaType = "application/vnd.dsse.envelope.v1+json"
	titleAnnotation   = "org.opencontainers.image.title"
	// maxStoredPart bounds what is read of one stored part: evidence fits a
	// ConfigMap, so anything larger is not evidence this wrote.
	maxStoredPart = MaxConfigMapBytes
	// maxStoredTotal bounds all parts together: SealParts keeps every part
	// of a bundle, with its envelope, within a ConfigMap too.
	maxStoredTotal = MaxConfigMapBytes
	// maxStoredParts bounds how many: receipt.json, receipt.sha256,
	// receipt.dsse.json, output.log, trajectory.json and the artifacts a
	// fixture may ask for.
	maxStoredParts = 5 + fixture.MaxArtifacts
)

// Files is the evidence as files by their folder names: receipt.json,
// receipt.sha256, receipt.dsse.json when signed, output.log and
// artifacts/<path>.
func (b *Bundle) Files() map[string][]byte {
	files := map[string][]byte{ReceiptName: b.ReceiptJSON, DigestName: []byte(b.Digest + "\n"), OutputName: b.Output}
	if b.Envelope != nil {
		files[EnvelopeName] = b.Envelope
	}
	if b.Trajectory != nil {
		files[TrajectoryName] = b.Trajectory
	}
	for _, a := range b.Receipt.Artifacts {
		if a.Stored {
			files[ArtifactsDir+"/"+a.Path] = b.Artifacts[a.Path]
		}
	}
	return files
}

// Image is the bundle as an OCI artifact.
func (b *Bundle) Image() (v1.Image, error) {
	return Image(b.Files(), map[string]string{
		"org.opencontainers.image.description": "HarnessFacts run evidence (docs/evidence.md)",
		"io.harnessfacts.receipt.digest":       b.Digest,
		"io.harnessfacts.run":                  b.Receipt.Run.Namespace + "/" + b.Receipt.Run.Name,
	})
}

// Image is evidence files (Files, Pull) as an OCI artifact with the given
// manifest annotations.
func Image(files map[string][]byte, annotations map[string]string) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), ArtifactType)
	var adds []mutate.Addendum
	for _, n := range sortedKeys(files) {
		mt := types.MediaType("application/octet-stream")
		switch n {
		case ReceiptName:
			mt = ReceiptMediaType
		case EnvelopeName:
			mt = EnvelopeMediaType
		}
		adds = append(adds, mutate.Addendum{Layer: static.NewLayer(files[n], mt), MediaType: mt,
			Annotations: map[string]string{titleAnnotation: n}})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, annotations).(v1.Image), nil
}

// Push stores the bundle at ref (a repository with a tag) and returns the
// reference pinned by the manifest's digest (repository@sha256:...).
// Registry credentials come from the standard keychain (a Docker config
// file, $DOCKER_CONFIG).
func (b *Bundle) Push(ctx context.Context, ref string) (string, error) {
	img, err := b.Image()
	if err != nil {
		return "", err
	}
	return PushImage(ctx, ref, img)
}

// PushImage stores an evidence artifact (Image) at ref, as Push.
func PushImage(ctx context.Context, ref string, img v1.Image) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("evidence reference %q: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing the evidence to %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return r.Context().Digest(d.String()).String(), nil
}

// Pull fetches stored evidence by reference and returns its files, by the
// names of their title annotations. A part that is not a clean relative
// name, a name twice, a part over the size of any evidence, or parts more
// (or larger together) than any evidence has are refused, by what the
// manifest says, before a part is fetched: the registry is not trusted,
// and a manifest of up to 100 MiB may name one blob thousands of times.
func Pull(ctx context.Context, ref string) (map[string][]byte, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("evidence reference %q: %w", ref, err)
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if string(m.Config.MediaType) != ArtifactType {
		return nil, fmt.Errorf("%s is not HarnessFacts evidence (config media type %q, want %q)", ref, m.Config.MediaType, ArtifactType)
	}
	if len(m.Layers) > maxStoredParts {
		return nil, fmt.Errorf("%s: %d parts, more than any evidence holds (%d)", ref, len(m.Layers), maxStoredParts)
	}
	var total int64
	for _, l := range m.Layers {
		n := l.Annotations[titleAnnotation]
		if l.Size < 0 || l.Size > maxStoredPart {
			return nil, fmt.Errorf("%s: the part %q is %d bytes, more than any evidence holds", ref, n, l.Size)
		}
		total += l.Size
	}
	if total > maxStoredTotal {
		return nil, fmt.Errorf("%s: its parts are %d bytes together, more than any evidence holds (%d)", ref, total, maxStoredTotal)
	}
	files := map[string][]byte{}
	for _, l := range m.Layers {
		n := l.Annotations[titleAnnotation]
		if !validRel(n) {
			return nil, fmt.Errorf("%s: a part named %q", ref, n)
		}
		if _, dup := files[n]; dup {
			return nil, fmt.Errorf("%s: the part %s twice", ref, n)
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			return nil, err
		}
		rc, err := layer.Compressed() // the blob as stored; ggcr checks its digest
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", ref, n, err)
		}
		// No more than the manifest said, which the bounds above hold.
		data, err := io.ReadAll(io.LimitReader(rc, l.Size+1))
		err = errors.Join(err, rc.Close())
		if err == nil && int64(len(data)) != l.Size {
			err = fmt.Errorf("not the %d bytes the manifest says", l.Size)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", ref, n, err)
		}
		files[n] = data
	}
	return files, nil
}

// VerifyFiles verifies evidence given as files by their folder names (Pull),
// as VerifyDir a folder.
func VerifyFiles(files map[string][]byte, wantDigest string, keys ...*PublicKey) *Report {
	return verify(fileStore(files), wantDigest, keys)
}

type fileStore map[string][]byte

func (f fileStore) get(name string, _ int64) ([]byte, bool, error) {
	b, ok := f[name]
	return b, ok, nil
}

func (fileStore) artifactName(_ int, a Artifact) string { return ArtifactsDir + "/" + a.Path }

func (f fileStore) rest(seen map[string]bool) ([]string, error) {
	var out []string
	for _, k := range sortedKeys(f) {
		if !seen[k] {
			out = append(out, k)
		}
	}
	return out, nil
}

// IsReference reports whether arg names stored evidence rather than a run
// or a folder: an oci:// URL, or a reference that names its registry (a
// first part with a dot, a port or localhost) and is pinned by digest, as
// status.evidence.storedRef always is. Anything else with a slash is a
// path: a folder that was not there (the command run from another
// directory, evidence/hello/latest) was read as a name on Docker Hub, the
// default registry, where someone else's bundle, or a replay of a signed
// one, would have been verified in its place.
func IsReference(arg string) (string, bool) {
	if s, ok := strings.CutPrefix(arg, "oci://"); ok {
		return s, true
	}
	host, rest, ok := strings.Cut(arg, "/")
	if !ok || rest == "" || !strings.Contains(rest, "@sha256:") {
		return arg, false
	}
	return arg, host == "localhost" || (strings.ContainsAny(host, ".:") && host != "." && host != "..")
}
