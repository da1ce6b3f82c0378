package runsource

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/harnessfacts/harnessfacts/internal/kube"
)

// TokenSource gives the bearer token a node-agent presents.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// TokenFile is a token the kubelet projects into the node-agent's pod (a
// serviceAccountToken volume with audience Audience), read at every use: the
// kubelet replaces it before it expires.
type TokenFile string

// Token reads the file.
func (f TokenFile) Token(context.Context) (string, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return "", fmt.Errorf("reading the node-agent's token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("the node-agent's token file %s is empty", string(f))
	}
	return t, nil
}

// TokenRequester creates an object's subresource (a ServiceAccount's
// token) and reads the answer back into body: a *kube.Client.
type TokenRequester interface {
	CreateSubResource(ctx context.Context, obj kube.Object, subresource string, body runtime.Object) error
}

// RequestedToken asks the API server for tokens of a service account (a
// TokenRequest), for a node-agent without a projected token: `harnessfacts
// dev`, or tests. A token is reused until 80 % of its life has passed.
type RequestedToken struct {
	// Client creates the TokenRequests; it needs create on
	// serviceaccounts/token of the account.
	Client         TokenRequester
	ServiceAccount types.NamespacedName
	// Bound, when set, binds the token to this object (a Pod or a Node):
	// the API server then adds the object's node to the token's user info.
	Bound *authnv1.BoundObjectReference
	// Audience defaults to Audience.
	Audience string
	// Lifetime defaults to ten minutes (the API server's minimum).
	Lifetime time.Duration

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// Token returns a fresh enough token.
func (r *RequestedToken) Token(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.token != "" && now.Before(r.renewAt) {
		return r.token, nil
	}
	aud, life := r.Audience, r.Lifetime
	if aud == "" {
		aud = Audience
	}
	if life == 0 {
		life = 10 * time.Minute
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{aud}, ExpirationSeconds: ptr.To(int64(life.Seconds())), BoundObjectRef: r.Bound,
	}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: r.ServiceAccount.Namespace, Name: r.ServiceAccount.Name}}
	if err := r.Client.CreateSubResource(ctx, sa, "token", tr); err != nil {
		return "", fmt.Errorf("requesting a token of service account %s: %w", r.ServiceAccount, err)
	}
	r.token = tr.Status.Token
	r.renewAt = now.Add(tr.Status.ExpirationTimestamp.Sub(now) * 4 / 5)
	return r.token, nil
}

// Client is a node-agent's side: it asks the controller for what a run it
// claimed needs.
type Client struct {
	base   string
	http   *http.Client
	tokens TokenSource
}

// NewClient makes a Client of the controller at baseURL (https), whose
// certificate must chain to caPEM and name baseURL's host.
func NewClient(baseURL string, caPEM []byte, tokens TokenSource) (*Client, error) {
	return NewClientWithServerName(baseURL, "", caPEM, tokens)
}

// NewClientWithServerName is NewClient for a controller reached at an
// address its certificate does not name (a pod IP on a cluster without
// Service routing): the certificate must name serverName instead.
func NewClientWithServerName(baseURL, serverName string, caPEM []byte, tokens TokenSource) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("the controller's address %q is not an https URL: the node-agent sends its token there", baseURL)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in the controller's CA bundle")
	}
	if tokens == nil {
		return nil, errors.New("no token source")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: serverName},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, tokens: tokens}, nil
}

// SecretKey asks for one key of a Secret the run selects.
func (c *Client) SecretKey(ctx context.Context, run RunRef, secret, key string) ([]byte, error) {
	out := SecretKeyResponse{}
	if err := c.call(ctx, PathSecretKey, SecretKeyRequest{Run: run, Secret: secret, Key: key}, &out); err != nil {
		return nil, err
	}
	return out.Value, nil
}

// Fixture asks for the run's fixture ConfigMap.
func (c *Client) Fixture(ctx context.Context, run RunRef) (*FixtureResponse, error) {
	out := &FixtureResponse{}
	if err := c.call(ctx, PathFixture, FixtureRequest{Run: run}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// SigningKey asks for the operator's evidence signing key (PEM); empty
// when the controller has none configured.
func (c *Client) SigningKey(ctx context.Context, run RunRef) ([]byte, error) {
	out := SigningKeyResponse{}
	if err := c.call(ctx, PathSigningKey, SigningKeyRequest{Run: run}, &out); err != nil {
		return nil, err
	}
	return out.PEM, nil
}

// RefusedError is the controller's answer when it does not serve a request.
type RefusedError struct {
	Status  int
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the controller refused (%d %s): %s", e.Status, http.StatusText(e.Status), e.Message)
}

// call posts in and decodes the answer into out. A controller that cannot
// be reached or fails (a rollout, a leader change) is asked again a few
// times; a refusal is final.
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	var last error
	for try, wait := 0, 250*time.Millisecond; try < 5; try, wait = try+1, wait*2 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
			case <-time.After(wait):
			}
		}
		var retry bool
		retry, last = c.once(ctx, path, body, out)
		if !retry {
			return last
		}
	}
	return fmt.Errorf("the controller at %s did not answer: %w", c.base, last)
}

func (c *Client) once(ctx context.Context, path string, body []byte, out any) (retry bool, err error) {
	token, err := c.tokens.Token(ctx)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr x509.UnknownAuthorityError
		var herr x509.HostnameError
		if errors.As(err, &uerr) || errors.As(err, &herr) {
			// Not the controller: never ask it again.
			return false, fmt.Errorf("the controller's certificate is not trusted: %w", err)
		}
		return true, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return true, err
	}
	if len(data) > maxResponseBytes {
		return false, fmt.Errorf("the controller's answer is larger than %d bytes", maxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		e := errorResponse{}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return resp.StatusCode >= 500, &RefusedError{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return false, fmt.Errorf("the controller's answer: %w", err)
	}
	return false, nil
}
