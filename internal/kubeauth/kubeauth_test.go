package kubeauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harnessfacts/harnessfacts/internal/kube"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

var (
	env *testenv.Env
	// k8s makes the tests' objects; api is the reviewers' client.
	k8s client.WithWatch
	api *kube.Client
)

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if api, err = kube.New(env.Config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// counting is the real client, counting the reviews it creates.
type counting struct {
	tokenReviews, accessReviews *atomic.Int32
}

func (c counting) Create(ctx context.Context, obj kube.Object) error {
	switch obj.(type) {
	case *authenticationv1.TokenReview:
		c.tokenReviews.Add(1)
	case *authorizationv1.SubjectAccessReview:
		c.accessReviews.Add(1)
	}
	return api.Create(ctx, obj)
}

func countingClient(tokenReviews, accessReviews *atomic.Int32) Creator {
	return counting{tokenReviews, accessReviews}
}

// serviceAccounts makes a fresh namespace with two service accounts,
// "reader" allowed get on /metrics and "nosy" allowed nothing, and returns
// a token of each.
func serviceAccounts(t *testing.T, ns string) (reader, nosy string) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	reader, nosy, err := hftesting.MetricsReaders(ctx, k8s, env.Config, ns, ns+"-metrics-reader", "reader", "nosy")
	if err != nil {
		t.Fatal(err)
	}
	return reader, nosy
}

func scrape(t *testing.T, h http.Handler, token string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestMiddlewareAsksTheAPIServerAndKeepsItsAnswers: a reader's token and
// access are reviewed once and kept for their times, a refused token and a
// denied access for theirs; nothing else reaches the metrics.
func TestMiddlewareAsksTheAPIServerAndKeepsItsAnswers(t *testing.T) {
	reader, nosy := serviceAccounts(t, "kubeauth-metrics")
	var tokenReviews, accessReviews atomic.Int32
	now := time.Now()
	rv := &Reviewer{Client: countingClient(&tokenReviews, &accessReviews), now: func() time.Time { return now }}
	h := rv.Middleware(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("harnessfacts_up 1\n"))
	}))
	reviews := func(wantTokens, wantAccess int32) {
		t.Helper()
		if tokenReviews.Load() != wantTokens || accessReviews.Load() != wantAccess {
			t.Fatalf("%d TokenReviews and %d SubjectAccessReviews, want %d and %d", tokenReviews.Load(), accessReviews.Load(), wantTokens, wantAccess)
		}
	}
	for range 3 {
		if code := scrape(t, h, reader); code != http.StatusOK {
			t.Fatalf("the reader got %d", code)
		}
	}
	reviews(1, 1)
	for range 2 {
		if code := scrape(t, h, nosy); code != http.StatusForbidden {
			t.Fatalf("a token without the right got %d", code)
		}
		if code := scrape(t, h, "not-a-token"); code != http.StatusUnauthorized {
			t.Fatalf("a made-up token got %d", code)
		}
		if code := scrape(t, h, ""); code != http.StatusUnauthorized {
			t.Fatalf("no token got %d", code)
		}
	}
	reviews(3, 2)

	// Past the refused token's and the denial's times, before the others'.
	now = now.Add(DenyTTL + time.Second)
	scrape(t, h, nosy)
	scrape(t, h, "not-a-token")
	scrape(t, h, reader)
	reviews(4, 3)
	// Past the tokens' time: each is reviewed again; the reader's access
	// is still known.
	now = now.Add(TokenTTL)
	scrape(t, h, reader)
	reviews(5, 3)
	now = now.Add(AllowTTL)
	scrape(t, h, reader)
	reviews(6, 4)
}

// TestTheSameQuestionIsNotAnotherUsers: the access cache answers only the
// same user with the same groups about the same thing.
func TestTheSameQuestionIsNotAnotherUsers(t *testing.T) {
	var tokenReviews, accessReviews atomic.Int32
	rv := &Reviewer{Client: countingClient(&tokenReviews, &accessReviews)}
	ctx := context.Background()
	metrics := authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}
	admin := User{Name: "admin", Groups: []string{"system:masters", "system:authenticated"}}
	if ok, _, err := rv.Authorize(ctx, admin, metrics); err != nil || !ok {
		t.Fatalf("system:masters may not get /metrics: %v %v", ok, err)
	}
	for name, u := range map[string]User{
		"another user":                    {Name: "someone", Groups: []string{"system:authenticated"}},
		"the name without system:masters": {Name: "admin", Groups: []string{"system:authenticated"}},
	} {
		if ok, _, err := rv.Authorize(ctx, u, metrics); err != nil || ok {
			t.Errorf("%s: allowed %v (%v) from the admin's answer", name, ok, err)
		}
	}
	other := authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "post"}}
	if _, _, err := rv.Authorize(ctx, admin, other); err != nil {
		t.Fatal(err)
	}
	if n := accessReviews.Load(); n != 4 {
		t.Errorf("%d SubjectAccessReviews for four different questions", n)
	}
}

// TestCachesAreBounded: fresh keys past the bound drop the expired answers,
// or all of them, rather than growing.
func TestCachesAreBounded(t *testing.T) {
	now := time.Now()
	var m map[[sha256.Size]byte]accessAnswer
	for i := range maxEntries {
		expires := now.Add(time.Minute)
		if i%2 == 0 {
			expires = now.Add(-time.Second)
		}
		m = store(m, sha256.Sum256(fmt.Append(nil, i)), accessAnswer{allowed: true, expires: expires}, now)
	}
	m = store(m, sha256.Sum256([]byte("one more")), accessAnswer{expires: now.Add(time.Minute)}, now)
	if len(m) != maxEntries/2+1 {
		t.Fatalf("%d answers after dropping the expired half and adding one, want %d", len(m), maxEntries/2+1)
	}
	for i := range maxEntries {
		m = store(m, sha256.Sum256(fmt.Append(nil, "fresh", i)), accessAnswer{expires: now.Add(time.Minute)}, now)
	}
	if len(m) > maxEntries {
		t.Fatalf("%d answers, more than %d", len(m), maxEntries)
	}
}

// Made-up tokens, one per request, cost the API server a TokenReview each:
// they are bounded (a Gate, 503 past it, unasked), and however many of
// them are refused they never push an accepted token out of the cache (the
// refused are kept apart): the reader's next scrape is not reviewed again.
func TestMadeUpTokensAreBoundedAndKeepTheReaderCached(t *testing.T) {
	reader, _ := serviceAccounts(t, "kubeauth-madeup")
	var tokenReviews, accessReviews atomic.Int32
	rv := &Reviewer{Client: countingClient(&tokenReviews, &accessReviews)}
	h := rv.Middleware(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	if code := scrape(t, h, reader); code != http.StatusOK {
		t.Fatalf("the reader: %d", code)
	}
	for i := range maxEntries + 10 {
		if code := scrape(t, h, fmt.Sprintf("made-up-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("a made-up token: %d", code)
		}
	}
	before := tokenReviews.Load()
	if code := scrape(t, h, reader); code != http.StatusOK || tokenReviews.Load() != before {
		t.Errorf("the reader after %d made-up tokens: %d, %d more reviews; want 200 from the cache", maxEntries+10, code, tokenReviews.Load()-before)
	}

	// A full gate answers 503 without asking.
	g := &Gate{Max: 2, PerAddr: 1}
	r1, ok1 := g.Enter("10.0.0.1:1000")
	_, ok2 := g.Enter("10.0.0.1:1001")
	r3, ok3 := g.Enter("10.0.0.2:1000")
	_, ok4 := g.Enter("10.0.0.3:1000")
	if !ok1 || ok2 || !ok3 || ok4 {
		t.Errorf("gate of 2, 1 an address: %t %t %t %t, want true false true false", ok1, ok2, ok3, ok4)
	}
	r1()
	r1() // twice: given back once
	if _, ok := g.Enter("10.0.0.1:1002"); !ok {
		t.Error("a place given back was not free")
	}
	r3()
	rv = &Reviewer{Client: countingClient(&tokenReviews, &accessReviews), Gate: &Gate{Max: 1}}
	hold, _ := rv.Gate.Enter("192.0.2.1:1")
	before = tokenReviews.Load()
	h = rv.Middleware(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	if code := scrape(t, h, "made-up-gated"); code != http.StatusServiceUnavailable || tokenReviews.Load() != before {
		t.Errorf("a full gate: %d after %d reviews; want 503 after none", code, tokenReviews.Load()-before)
	}
	hold()
}
