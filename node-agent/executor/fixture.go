package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
	"github.com/harnessfacts/harnessfacts/node-agent/registry"
)

// readFixture reads the fixture the run names and settles the attempt's
// limits with harnessv1.ResolveLimits: the run's, then the fixture's, then
// the defaults, under the HarnessPolicy ceilings the controller recorded
// when it bound the run. A fixture asking for more than a ceiling allows is
// refused, never cut.
func (a *attempt) readFixture(ctx context.Context) error {
	var fix *fixture.Fixture
	var err error
	if src := a.run.Spec.Fixture; src.Git != nil || src.OCI != nil {
		fix, err = a.remoteFixture(ctx)
		if err != nil {
			return err
		}
	} else if fix, err = a.e.opts.Sources.Fixture(ctx, a.run, fixture.Limits{}); err != nil {
		return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be used: %w", err))
	}
	a.fix = fix
	a.setLimits(harnessv1.ResolveLimits(a.run.Spec.Limits, fix.Manifest.Limits, a.run.Status.LimitCeilings))
	if v := a.resolved.Violations; len(v) > 0 {
		words := make([]string, len(v))
		for i := range v {
			words[i] = v[i].String()
		}
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("refused by the namespace's HarnessPolicies: %s", strings.Join(words, "; ")))
	}
	if f := a.e.opts.LimitsSettled; f != nil {
		f(ctx, a.run, *a.resolved, int32(len(fix.Manifest.Checks)))
	}
	return nil
}

// setLimits makes r the attempt's limits.
func (a *attempt) setLimits(r harnessv1.ResolvedLimits) {
	a.resolved = &r
	a.limits = r.Limits
}

// remoteFixture fetches a git or OCI fixture through the node's fixture
// cache, with the credentials the run names read through its Sources (the
// controller's run source on a cluster: the node-agent reads no Secret
// itself). A source that cannot be fetched or does not match its pin is
// FixtureUnavailable; a fetched fixture that breaks a rule is BadFixture.
func (a *attempt) remoteFixture(ctx context.Context) (*fixture.Fixture, error) {
	src := a.run.Spec.Fixture
	cache := a.e.fixtureCache()
	var res *fixturesource.Result
	var err error
	switch {
	case src.Git != nil:
		g := src.Git
		a.fixtureSource = &harnessv1.FixtureSourceStatus{Type: "Git", URL: g.URL, Commit: g.Commit, Path: g.Path}
		fetch := fixturesource.Git{URL: g.URL, Commit: g.Commit, Path: g.Path}
		if g.SecretRef != nil {
			var kv [2][]byte
			for i, key := range []string{GitUsernameKey, GitPasswordKey} {
				v, err := a.e.opts.Sources.SecretKey(ctx, a.run, harnessv1.SecretKeySelector{Name: g.SecretRef.Name, Key: key})
				if err != nil {
					return nil, fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("the git credentials Secret %q (key %s): %w", g.SecretRef.Name, key, err))
				}
				kv[i] = v
			}
			user, pass := kv[0], kv[1]
			if len(pass) == 0 || len(user) == 0 {
				return nil, fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("the git credentials Secret %q has an empty %s or %s", g.SecretRef.Name, GitUsernameKey, GitPasswordKey))
			}
			fetch.Username, fetch.Password = string(user), string(pass)
		}
		res, err = cache.Git(ctx, fetch)
	case src.OCI != nil:
		a.fixtureSource = &harnessv1.FixtureSourceStatus{Type: "OCI", Ref: src.OCI.Ref}
		kc, kerr := a.keychain(ctx, src.OCI.ImagePullSecrets)
		if kerr != nil {
			return nil, kerr
		}
		res, err = cache.OCI(ctx, fixturesource.OCI{Ref: src.OCI.Ref, Keychain: kc})
	}
	var bad *fixture.Error
	switch {
	case errors.As(err, &bad):
		return nil, fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be used: %w", err))
	case err != nil:
		return nil, fail(harnessv1.ReasonFixtureUnavailable, registry.Describe(err))
	}
	a.fixtureSource.Digest, a.fixtureSource.Cached = res.Digest, res.Cached
	return res.Fixture, nil
}

// The keys of a git fixture's credentials Secret (a kubernetes.io/basic-auth
// Secret's), the only ones of it the node-agent reads.
const (
	GitUsernameKey = "username"
	GitPasswordKey = "password"
)
