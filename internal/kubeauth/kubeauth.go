// Package kubeauth lets HarnessFacts' own HTTPS endpoints (the node-agent's
// live output, the controller's and the node-agent's metrics) trust only
// callers the API server vouches for: who a caller is through a TokenReview
// of its bearer token (or a client certificate of the cluster's client CA),
// what it may do through a SubjectAccessReview. The answers are kept for a
// short while, with the kubelet's and controller-runtime's times, so a
// Prometheus scraping every few seconds costs the API server two reviews a
// few times an hour, not two a scrape.
//
// It is written here rather than taken from k8s.io/apiserver's delegating
// authenticator and authorizer (which controller-runtime's metrics filter
// wraps) because those bring the API server's libraries, CEL and gRPC with
// them: about 250 packages and a third of the node-agent's resident memory,
// for two API calls and a cache.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/harnessfacts/harnessfacts/internal/kube"
)

// How long answers are kept: a token's review a minute (controller-runtime's
// metrics filter; the kubelet keeps it two), a refused token ten seconds;
// an allowed access five minutes and a denied one thirty seconds (both the
// kubelet's and controller-runtime's).
const (
	TokenTTL        = time.Minute
	RefusedTokenTTL = 10 * time.Second
	AllowTTL        = 5 * time.Minute
	DenyTTL         = 30 * time.Second
)

// maxEntries bounds each cache: a caller sending fresh tokens cannot grow
// the node-agent's memory without bound.
const maxEntries = 4096

// User is who the API server says a caller is.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string]authorizationv1.ExtraValue
}

// Creator creates objects and reads back the API server's answer into
// them: a *kube.Client, or a test's stand-in.
type Creator interface {
	Create(ctx context.Context, obj kube.Object) error
}

// Reviewer authenticates and authorizes requests with the API server.
type Reviewer struct {
	// Client creates TokenReviews and SubjectAccessReviews.
	Client Creator
	// ClientCAs verify client certificates; nil accepts bearer tokens only.
	ClientCAs *x509.CertPool
	// Gate, when set, bounds the TokenReviews asked at once for tokens
	// not in the cache (503 beyond).
	Gate *Gate

	now    func() time.Time
	mu     sync.Mutex
	tokens map[[sha256.Size]byte]tokenAnswer
	// refused holds the refused tokens apart: made-up tokens filling the
	// cache dropped every accepted one with them, and each scraper's next
	// request was reviewed again.
	refused map[[sha256.Size]byte]tokenAnswer
	access  map[[sha256.Size]byte]accessAnswer
}

type tokenAnswer struct {
	user    User
	ok      bool
	expires time.Time
}

type accessAnswer struct {
	allowed bool
	reason  string
	expires time.Time
}

// Authenticate finds the caller of r: a client certificate the TLS handshake
// verified against ClientCAs, else a bearer token the API server's
// TokenReview accepts. On failure it returns the HTTP status to answer with:
// 401 for missing or refused credentials, 503 when the API server could not
// be asked.
func (rv *Reviewer) Authenticate(r *http.Request) (User, int, error) {
	if rv.ClientCAs != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		if leaf.Subject.CommonName == "" {
			return User{}, http.StatusUnauthorized, errors.New("the client certificate names no user")
		}
		return User{Name: leaf.Subject.CommonName, Groups: append([]string{"system:authenticated"}, leaf.Subject.Organization...)}, 0, nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return User{}, http.StatusUnauthorized, errors.New("no credentials: send a bearer token the cluster accepts, or a client certificate of the cluster's client CA")
	}
	key := sha256.Sum256([]byte(token))
	if a, ok := rv.cachedToken(key); ok {
		return answerToken(a)
	}
	release, ok := rv.Gate.Enter(r.RemoteAddr)
	if !ok {
		return User{}, http.StatusServiceUnavailable, errors.New("too many credentials are being reviewed at once; try again later")
	}
	defer release()
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := rv.Client.Create(r.Context(), tr); err != nil {
		return User{}, http.StatusServiceUnavailable, fmt.Errorf("the token could not be reviewed: %w", err)
	}
	a := tokenAnswer{ok: tr.Status.Authenticated, expires: rv.clock().Add(RefusedTokenTTL)}
	if a.ok {
		u := tr.Status.User
		a.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: map[string]authorizationv1.ExtraValue{}}
		for k, v := range u.Extra {
			a.user.Extra[k] = authorizationv1.ExtraValue(v)
		}
		a.expires = rv.clock().Add(TokenTTL)
	}
	rv.mu.Lock()
	if a.ok {
		rv.tokens = store(rv.tokens, key, a, rv.clock())
	} else {
		rv.refused = store(rv.refused, key, a, rv.clock())
	}
	rv.mu.Unlock()
	return answerToken(a)
}

func answerToken(a tokenAnswer) (User, int, error) {
	if !a.ok {
		return User{}, http.StatusUnauthorized, errors.New("the API server did not accept the token")
	}
	return a.user, 0, nil
}

// Authorize asks the API server whether u may do what spec's resource or
// non-resource attributes say (its user fields are set from u). It returns
// whether it may, the authorizer's reason, and an error only when the API
// server could not be asked.
func (rv *Reviewer) Authorize(ctx context.Context, u User, attrs authorizationv1.SubjectAccessReviewSpec) (bool, string, error) {
	attrs.User, attrs.UID, attrs.Groups, attrs.Extra = u.Name, u.UID, u.Groups, u.Extra
	// encoding/json writes struct fields in order and map keys sorted: the
	// same question always has the same key.
	raw, err := json.Marshal(attrs)
	if err != nil {
		return false, "", err
	}
	key := sha256.Sum256(raw)
	rv.mu.Lock()
	a, ok := rv.access[key]
	rv.mu.Unlock()
	if ok && rv.clock().Before(a.expires) {
		return a.allowed, a.reason, nil
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: attrs}
	if err := rv.Client.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("the access could not be reviewed: %w", err)
	}
	a = accessAnswer{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason, expires: rv.clock().Add(DenyTTL)}
	if a.allowed {
		a.expires = rv.clock().Add(AllowTTL)
	}
	rv.mu.Lock()
	rv.access = store(rv.access, key, a, rv.clock())
	rv.mu.Unlock()
	return a.allowed, a.reason, nil
}

func (rv *Reviewer) cachedToken(key [sha256.Size]byte) (tokenAnswer, bool) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	a, ok := rv.tokens[key]
	if !ok {
		a, ok = rv.refused[key]
	}
	return a, ok && rv.clock().Before(a.expires)
}

func (rv *Reviewer) clock() time.Time {
	if rv.now != nil {
		return rv.now()
	}
	return time.Now()
}

type expiring interface{ expiry() time.Time }

func (a tokenAnswer) expiry() time.Time  { return a.expires }
func (a accessAnswer) expiry() time.Time { return a.expires }

// store puts v in m, first dropping the expired answers when m is full, and
// all of them when none had expired.
func store[V expiring](m map[[sha256.Size]byte]V, key [sha256.Size]byte, v V, now time.Time) map[[sha256.Size]byte]V {
	if m == nil {
		m = map[[sha256.Size]byte]V{}
	}
	if len(m) >= maxEntries {
		for k, old := range m {
			if !now.Before(old.expiry()) {
				delete(m, k)
			}
		}
		if len(m) >= maxEntries {
			clear(m)
		}
	}
	m[key] = v
	return m
}
