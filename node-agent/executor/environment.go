package executor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/envimage"
	"github.com/harnessfacts/harnessfacts/node-agent/registry"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// DockerConfigKey is the key of a kubernetes.io/dockerconfigjson Secret,
// the only key of an imagePullSecret the node-agent reads.
const DockerConfigKey = ".dockerconfigjson"

// environment is the attempt's environment image, when it has one.
type environment struct {
	status  harnessv1.EnvironmentStatus
	image   *envimage.Image
	overlay *envimage.Overlay
}

// environmentRef is the image the run names, else its fixture's, and where
// it came from; "" when neither names one.
func (a *attempt) environmentRef() (ref, source string) {
	if e := a.run.Spec.Environment; e != nil && e.Image != "" {
		return e.Image, "Run"
	}
	if e := a.fix.Manifest.Environment; e != nil && e.Image != "" {
		return e.Image, "Fixture"
	}
	return "", ""
}

// judgeFixtureImage refuses a fixture's environment image that the
// namespace's HarnessPolicies would refuse in the run's own spec: the
// admission policy, the controller and the claim judge the run's spec, and
// fixture.yaml is the run author's too (an inline fixture, a ConfigMap of
// theirs), so an image moved from the run into its fixture stepped around
// network.allowedSources (the node-agent dialled any registry an author
// named, on the node's network). Judged before anything is fetched.
func (a *attempt) judgeFixtureImage(ctx context.Context, ref string) error {
	check := a.e.opts.PolicyViolations
	if check == nil {
		return nil
	}
	judged := a.run.DeepCopy()
	judged.Spec.Environment = &harnessv1.EnvironmentSpec{Image: ref}
	violations, err := check(ctx, judged)
	if err != nil {
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("the namespace's HarnessPolicies could not be read to judge the fixture's environment image, so the run is refused: %w", err))
	}
	if len(violations) > 0 {
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("the fixture's environment image %s is refused by the namespace's HarnessPolicies: %s", ref, strings.Join(violations, "; ")))
	}
	return nil
}

// prepareEnvironment pulls (or finds in the node's cache) the run's
// environment image and mounts the run's writable overlay over it, which
// becomes the root of the agent's and the checks' sandboxes. Without an
// environment it does nothing: the sandbox shows the node's own root.
func (a *attempt) prepareEnvironment(ctx context.Context) error {
	ref, source := a.environmentRef()
	if ref == "" {
		return nil
	}
	bad := func(err error) error { return fail(harnessv1.ReasonEnvironmentUnavailable, err) }
	if source == "Fixture" {
		if err := a.judgeFixtureImage(ctx, ref); err != nil {
			return err
		}
	}
	cache, err := a.e.imageCache()
	if err != nil {
		return bad(fmt.Errorf("this node-agent has no image cache, so it cannot run an environment image: %w", err))
	}
	if a.runner.Mode() != sandbox.ModeBwrap {
		return bad(fmt.Errorf("an environment image needs the bwrap sandbox; this run would use %s", a.runner.Mode()))
	}
	kc, err := a.pullKeychain(ctx)
	if err != nil {
		return err
	}
	img, release, err := cache.Get(ctx, ref, envimage.PullOptions{Keychain: kc})
	if err != nil {
		return bad(registry.Describe(err))
	}
	a.deferCleanup(release)
	for _, kv := range img.Config.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			// The registry's config, not the run: refused as the image's
			// fault, before a sandbox would refuse it as the node's.
			k, _, _ := strings.Cut(kv, "=")
			return bad(fmt.Errorf("the environment image %s sets the variable %q to a value holding a NUL byte, which no environment can carry", ref, strings.ToValidUTF8(k, "?")))
		}
	}
	uid, gid := a.runIDs().uid, a.runIDs().gid
	ov, err := envimage.Mount(img.Root, filepath.Join(a.dir.Path, "env"), uid, gid)
	if err != nil {
		return bad(fmt.Errorf("the environment image %s: %w", ref, err))
	}
	// The run dir's removal unmounts the overlay (fixture.RunDir.Empty).
	a.env = &environment{image: img, overlay: ov, status: harnessv1.EnvironmentStatus{
		Image: ref, Digest: img.Digest, ConfigDigest: img.ConfigDigest, Source: source}}
	return nil
}

// pullKeychain reads the run's imagePullSecrets through the run's Sources
// (the controller's run source on a cluster: the node-agent has no right
// to read Secrets) and makes a keychain of their registries.
func (a *attempt) pullKeychain(ctx context.Context) (authn.Keychain, error) {
	e := a.run.Spec.Environment
	if e == nil {
		return nil, nil
	}
	return a.keychain(ctx, e.ImagePullSecrets)
}

// keychain reads the .dockerconfigjson of the pull secrets through the
// run's Sources and makes a keychain of their registries; nil for none.
func (a *attempt) keychain(ctx context.Context, secrets []harnessv1.LocalObjectReference) (authn.Keychain, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	var configs [][]byte
	for _, s := range secrets {
		b, err := a.e.opts.Sources.SecretKey(ctx, a.run, harnessv1.SecretKeySelector{Name: s.Name, Key: DockerConfigKey})
		if err != nil {
			return nil, fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("the image pull secret %q (key %s): %w", s.Name, DockerConfigKey, err))
		}
		configs = append(configs, b)
	}
	kc, err := envimage.DockerConfigKeychain(configs...)
	if err != nil {
		return nil, fail(harnessv1.ReasonCredentialsUnavailable, err)
	}
	return kc, nil
}

// environmentEnv is the image's own environment (its config's Env) that
// the sandbox keeps: what the harness sets itself (HOME, TMPDIR, the XDG
// folders, the run's variables) wins, and the image's PATH replaces the
// node's.
func (a *attempt) environmentEnv(env []string) []string {
	if a.env == nil {
		return env
	}
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := append([]string(nil), env...)
	for _, kv := range a.env.image.Config.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if k == "PATH" {
			out = setEnv(out, "PATH", v)
			continue
		}
		if !set[k] && !strings.HasPrefix(k, "HARNESSFACTS_") {
			out = append(out, kv)
		}
	}
	return out
}
