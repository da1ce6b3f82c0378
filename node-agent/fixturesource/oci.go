package fixturesource

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/registry"
)

// OCI names a fixture artifact.
type OCI struct {
	// Ref is registry/repository[:tag]@sha256:<hex>.
	Ref string
	// Keychain holds the run's pull credentials; nil is anonymous (never
	// the node's own docker configuration).
	Keychain authn.Keychain
}

// The empty config of an artifact (the OCI image spec's empty descriptor).
const (
	emptyConfigMediaType = types.MediaType("application/vnd.oci.empty.v1+json")
	emptyConfig          = "{}"
)

// tarEntryOverhead is what one tar entry may take beyond its content (see
// package fixture): a layer longer than the fixture's bounds allow is
// refused before it is read.
const tarEntryOverhead = 8 << 10

func parseDigestRef(ref string) (name.Digest, error) {
	d, err := name.NewDigest(ref)
	if err != nil {
		return name.Digest{}, unavailable("the fixture artifact reference %q is not pinned by digest (registry/repository[:tag]@sha256:<hex>): %v", ref, err)
	}
	return d, nil
}

func (o Options) remoteOptions(ctx context.Context, kc authn.Keychain) []remote.Option {
	return registry.Options(ctx, kc, o.RootCAs)
}

// checkAccess asks the registry, with the run's credentials, for the
// manifest's descriptor: a cached fixture is used only for a run that may
// still pull it.
func checkAccess(ctx context.Context, src OCI, o Options) error {
	d, err := parseDigestRef(src.Ref)
	if err != nil {
		return err
	}
	desc, err := remote.Head(d, o.remoteOptions(ctx, src.Keychain)...)
	if err != nil {
		return unavailable("the fixture artifact %s: %v", src.Ref, registry.Describe(err))
	}
	if desc.Digest.String() != d.DigestStr() {
		return unavailable("the registry answers %s for the fixture artifact %s: not the digest asked for", desc.Digest, src.Ref)
	}
	return nil
}

// pullOCI pulls the artifact and returns its fixture and the manifest's
// digest. The manifest must have the digest of the reference and the layer
// the digest the manifest names (both checked here on the bytes read), and
// the layer's tar is read under the fixture's bounds.
func pullOCI(ctx context.Context, src OCI, o Options) (*fixture.Fixture, string, error) {
	d, err := parseDigestRef(src.Ref)
	if err != nil {
		return nil, "", err
	}
	opts := o.remoteOptions(ctx, src.Keychain)
	desc, err := remote.Get(d, opts...)
	if err != nil {
		return nil, "", unavailable("pulling the fixture artifact %s: %v", src.Ref, registry.Describe(err))
	}
	if got := sha256Digest(desc.Manifest); got != d.DigestStr() {
		return nil, "", unavailable("the registry sent a manifest of digest %s for the fixture artifact %s", got, src.Ref)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, "", unavailable("the fixture artifact %s: its manifest: %v", src.Ref, err)
	}
	if m.MediaType != "" && m.MediaType != types.OCIManifestSchema1 {
		return nil, "", unavailable("the fixture artifact %s is a %s, not an OCI image manifest", src.Ref, m.MediaType)
	}
	if m.ArtifactType != harnessv1.FixtureArtifactType && string(m.Config.MediaType) != harnessv1.FixtureArtifactType {
		return nil, "", unavailable("%s is not a fixture artifact: its artifactType is %q, not %s", src.Ref, m.ArtifactType, harnessv1.FixtureArtifactType)
	}
	if len(m.Layers) != 1 || string(m.Layers[0].MediaType) != harnessv1.FixtureLayerMediaType {
		return nil, "", unavailable("the fixture artifact %s must have exactly one layer of media type %s", src.Ref, harnessv1.FixtureLayerMediaType)
	}
	layer := m.Layers[0]
	lim := o.limits()
	maxLayer := lim.MaxTotalBytes + int64(lim.MaxEntries)*tarEntryOverhead
	if layer.Size < 0 || layer.Size > maxLayer {
		return nil, "", &fixture.Error{Kind: fixture.ErrTooLarge, Detail: fmt.Sprintf("the fixture artifact's layer has %d bytes, more than the %d a fixture may take", layer.Size, maxLayer)}
	}
	rl, err := remote.Layer(d.Context().Digest(layer.Digest.String()), opts...)
	if err != nil {
		return nil, "", unavailable("the fixture artifact %s: its layer: %v", src.Ref, registry.Describe(err))
	}
	rc, err := rl.Compressed()
	if err != nil {
		return nil, "", unavailable("the fixture artifact %s: its layer: %v", src.Ref, registry.Describe(err))
	}
	// The layer is read once, as it arrives: hashed, counted and unpacked
	// together, so that the node-agent never holds the compressed layer
	// beside the files it holds (a layer near the bound held twice over
	// went past the node-agent's memory bound). Nothing read is used
	// before its digest and size are checked, at the end.
	h := sha256.New()
	n := &countingReader{r: io.LimitReader(rc, layer.Size+1)}
	body := io.TeeReader(n, h)
	fix, ferr := unpackLayer(body, lim)
	_, derr := io.Copy(io.Discard, body) // the rest, so the digest covers every byte
	_ = rc.Close()
	if derr != nil {
		return nil, "", unavailable("the fixture artifact %s: reading its layer: %v", src.Ref, registry.Describe(derr))
	}
	if n.n != layer.Size || "sha256:"+hex.EncodeToString(h.Sum(nil)) != layer.Digest.String() {
		return nil, "", unavailable("the fixture artifact %s: its layer is not the %d bytes of digest %s its manifest names", src.Ref, layer.Size, layer.Digest)
	}
	if ferr != nil {
		return nil, "", ferr
	}
	return fix, d.DigestStr(), nil
}

// unpackLayer reads a fixture layer: a gzip-compressed tar.
func unpackLayer(r io.Reader, lim fixture.Limits) (*fixture.Fixture, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, &fixture.Error{Kind: fixture.ErrBadSource, Detail: fmt.Sprintf("the fixture artifact's layer is not gzip: %v", err)}
	}
	return fixture.FromTar(zr, lim)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func sha256Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// rawManifest is a manifest to put as it is.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.raw, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }

// Push pushes fix as a fixture artifact to ref (registry/repository:tag)
// and returns the reference pinned by its digest, for spec.fixture.oci.ref.
// The same fixture always makes the same artifact, so the same digest.
func Push(ctx context.Context, fix *fixture.Fixture, ref string, opts ...remote.Option) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("the artifact reference %q: %w", ref, err)
	}
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz) // no name, no time: the same bytes every time
	if err := fix.WriteTar(zw); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	layer := static.NewLayer(tgz.Bytes(), types.MediaType(harnessv1.FixtureLayerMediaType))
	config := static.NewLayer([]byte(emptyConfig), emptyConfigMediaType)
	for _, l := range []v1.Layer{layer, config} {
		if err := remote.WriteLayer(tag.Context(), l, opts...); err != nil {
			return "", fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  harnessv1.FixtureArtifactType,
		Config: v1.Descriptor{MediaType: emptyConfigMediaType, Size: int64(len(emptyConfig)),
			Digest: mustHash(sha256Digest([]byte(emptyConfig)))},
		Layers: []v1.Descriptor{{MediaType: types.MediaType(harnessv1.FixtureLayerMediaType), Size: int64(tgz.Len()),
			Digest: mustHash(sha256Digest(tgz.Bytes())), Annotations: map[string]string{"org.opencontainers.image.title": "fixture.tar.gz"}}},
		Annotations: map[string]string{"io.harnessfacts.fixture.digest": fix.Digest},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if err := remote.Put(tag, rawManifest{raw: raw, mt: types.OCIManifestSchema1}, opts...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return tag.String() + "@" + sha256Digest(raw), nil
}

func mustHash(s string) v1.Hash {
	h, err := v1.NewHash(s)
	if err != nil {
		panic(err)
	}
	return h
}
