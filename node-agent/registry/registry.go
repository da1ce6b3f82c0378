// Package registry is what the node-agent's two pulls from a registry the
// run author names (an environment image, an OCI fixture artifact) share:
// go-containerregistry's options with the node's fetch transport, and the
// bounds on what such a registry may make the node-agent hold in memory.
//
// go-containerregistry reads a manifest of up to 100 MiB and an image's
// config blob whole, however large its manifest says it is. The node-agent
// holds every run of its node: a registry answering with a 95 MiB manifest
// or a 600 MiB config (under the pinned digest, so every check passes)
// took it past the chart's 512Mi memory bound, and the kernel killed it
// with every run of the node. So manifests are cut as they are read, and a
// config is fetched only when its manifest declares a size within bounds,
// which go-containerregistry then enforces on the bytes read.
package registry

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/harnessfacts/harnessfacts/node-agent/egress"
)

// MaxManifestBytes bounds a manifest or an index, as it is read: 4 MiB is
// what the OCI distribution spec asks registries to accept at least, and an
// image's is a few KiB.
const MaxManifestBytes = 4 << 20

// MaxConfigBytes bounds an image's config blob (its environment, user,
// entry point and layer history): an image's is a few KiB.
const MaxConfigBytes = 4 << 20

// ErrTooLarge is what errors.Is finds in the refusal of a manifest or a
// config past its bound; the error's text is the refusal's detail only.
var ErrTooLarge = errors.New("larger than the node-agent reads from a registry")

type tooLarge string

func (e tooLarge) Error() string        { return string(e) }
func (e tooLarge) Is(target error) bool { return target == ErrTooLarge }

func tooLargef(format string, a ...any) error { return tooLarge(fmt.Sprintf(format, a...)) }

// Options are go-containerregistry's options for a pull the run author
// points at a registry: the run's credentials (nil: anonymous, never the
// node's own docker configuration), the node's fetch transport (metadata
// and link-local addresses refused at connect, since the node-agent dials
// from the node) with manifests cut at MaxManifestBytes, and roots (nil:
// the system's) to trust.
func Options(ctx context.Context, kc authn.Keychain, roots *x509.CertPool) []remote.Option {
	if kc == nil {
		kc = authn.NewMultiKeychain() // anonymous
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
		remote.WithTransport(Transport(roots))}
}

// Transport is the transport of one pull: egress.FetchTransport(roots),
// its connections judged by egress.PullControl (a registry on a public
// address is not followed inside), with every manifest response cut at
// MaxManifestBytes: one that says it is longer is refused before its body
// is read, one that runs longer fails as it passes the bound.
func Transport(roots *x509.CertPool) http.RoundTripper {
	return manifestCap{next: egress.FetchTransportWith(roots, egress.PullControl())}
}

// CheckManifest refuses an image manifest whose config or layers a pull
// could not hold: a config of unknown size (-1, which go-containerregistry
// reads to its end) or over MaxConfigBytes, a layer of unknown size, or
// layers that together declare more than maxLayerBytes (compressed; 0: no
// bound). Nothing is fetched.
func CheckManifest(m *v1.Manifest, maxLayerBytes int64) error {
	if m.Config.Data == nil && (m.Config.Size < 0 || m.Config.Size > MaxConfigBytes) {
		return tooLargef("the manifest declares a config of %d bytes; a config may have at most %d", m.Config.Size, MaxConfigBytes)
	}
	if len(m.Config.Data) > MaxConfigBytes {
		return tooLargef("the manifest embeds a config of %d bytes; a config may have at most %d", len(m.Config.Data), MaxConfigBytes)
	}
	var total int64
	for i, l := range m.Layers {
		if l.Size < 0 {
			return fmt.Errorf("the manifest declares no size for layer %d (%d): a layer must say how large it is", i+1, l.Size)
		}
		total += l.Size
		if maxLayerBytes > 0 && (total > maxLayerBytes || total < 0) {
			return tooLargef("its layers declare more than %d bytes, more than the node holds", maxLayerBytes)
		}
	}
	return nil
}

// manifestCap cuts every manifest response at MaxManifestBytes.
type manifestCap struct{ next http.RoundTripper }

func (m manifestCap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := m.next.RoundTrip(req)
	if err != nil || !isManifestPath(req.URL.Path) {
		return resp, err
	}
	if resp.ContentLength > MaxManifestBytes {
		_ = resp.Body.Close()
		return nil, tooLargef("the manifest has %d bytes; a manifest may have at most %d", resp.ContentLength, MaxManifestBytes)
	}
	resp.Body = &cappedManifest{rc: resp.Body, left: MaxManifestBytes}
	return resp, nil
}

// isManifestPath reports whether p is a registry's /v2/<name>/manifests/<ref>.
func isManifestPath(p string) bool {
	parts := strings.Split(p, "/")
	return len(parts) >= 3 && parts[len(parts)-2] == "manifests"
}

type cappedManifest struct {
	rc   io.ReadCloser
	left int64
}

func (c *cappedManifest) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return n, tooLargef("the manifest is longer than the %d bytes a manifest may have", MaxManifestBytes)
	}
	return n, err
}

func (c *cappedManifest) Close() error { return c.rc.Close() }

// Describe is err as the run may show it: an answer of the registry that
// is an error keeps its request, status and the registry's error codes,
// and loses the body go-containerregistry quotes when the answer is no
// registry's error document. The run author names the registry, and with
// it a token endpoint (the realm of its WWW-Authenticate): the node-agent
// fetches from the node's network, private addresses included, and what
// an internal service answered there would reach the run's status. The
// result unwraps to err.
//
// A token endpoint's answer of 200 that is a JSON object without a token is
// no transport.Error: go-containerregistry quotes all of it (up to 64 KiB)
// after "no token in bearer response:", in a plain error; that text is cut
// at its start.
func Describe(err error) error {
	if err == nil {
		return nil
	}
	var te *transport.Error
	if !errors.As(err, &te) {
		msg := err.Error()
		if i := strings.Index(msg, noTokenAnswer); i >= 0 {
			return &described{msg: msg[:i] + noTokenDescribed, err: err}
		}
		return err
	}
	var b strings.Builder
	if te.Request != nil {
		fmt.Fprintf(&b, "%s %s: ", te.Request.Method, redactURL(te.Request.URL))
	}
	fmt.Fprintf(&b, "the registry answered %d %s", te.StatusCode, http.StatusText(te.StatusCode))
	for i, d := range te.Errors {
		if i == 4 {
			fmt.Fprintf(&b, " (and %d more)", len(te.Errors)-i)
			break
		}
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		// The code only, one the distribution spec names: the message
		// is the answering server's own text, and an internal service
		// that speaks the registry's error document put up to 800 bytes
		// of its own into a run author's status.
		code := string(d.Code)
		if !specCodes[code] {
			code = "an error code of its own"
		}
		fmt.Fprintf(&b, "%s%s", sep, code)
	}
	msg := err.Error()
	if strings.Contains(msg, noTokenAnswer) {
		// Both: the request's description alone, and that a token
		// endpoint answered without a token.
		msg = b.String() + "; " + noTokenDescribed
	} else if strings.Count(msg, te.Error()) == 1 {
		msg = strings.Replace(msg, te.Error(), b.String(), 1)
	} else {
		// The answer's text was wrapped other than verbatim (quoted,
		// joined with another): the request's description alone.
		msg = b.String()
	}
	return &described{msg: msg, err: err}
}

// specCodes are the error codes of the OCI distribution spec (and Docker's
// registry API before it).
var specCodes = map[string]bool{
	"BLOB_UNKNOWN": true, "BLOB_UPLOAD_INVALID": true, "BLOB_UPLOAD_UNKNOWN": true, "DIGEST_INVALID": true,
	"MANIFEST_BLOB_UNKNOWN": true, "MANIFEST_INVALID": true, "MANIFEST_UNKNOWN": true, "MANIFEST_UNVERIFIED": true,
	"NAME_INVALID": true, "NAME_UNKNOWN": true, "SIZE_INVALID": true, "TAG_INVALID": true, "UNAUTHORIZED": true,
	"DENIED": true, "UNSUPPORTED": true, "TOOMANYREQUESTS": true, "UNKNOWN": true,
}

// noTokenAnswer begins go-containerregistry's error for a token endpoint's
// answer without a token, which it follows with the answer's body.
const (
	noTokenAnswer    = "no token in bearer response:"
	noTokenDescribed = "the registry's token endpoint answered without a token (its answer is not shown)"
)

type described struct {
	msg string
	err error
}

func (d *described) Error() string { return d.msg }
func (d *described) Unwrap() error { return d.err }

// redactURL is u without its query and user (a token endpoint's query
// names the scope; a URL may carry credentials).
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User, c.RawQuery, c.Fragment = nil, "", ""
	return c.String()
}
