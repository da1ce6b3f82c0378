package runsource

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/certfile"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
)

// Reader reads objects: a *kube.Client, which reads straight from the API
// server.
type Reader interface {
	Get(ctx context.Context, key types.NamespacedName, obj kube.Object) error
}

// Reviewer creates objects and reads back the API server's answer into
// them (TokenReviews): a *kube.Client.
type Reviewer interface {
	Create(ctx context.Context, obj kube.Object) error
}

// Options configure a Server.
type Options struct {
	// Reader reads runs, Secrets and ConfigMaps straight from the API server
	// (a *kube.Client): never a cache, which would hold every Secret of the
	// cluster in the controller's memory and answer from a stale run.
	Reader Reader
	// Reviewer creates TokenReviews.
	Reviewer Reviewer
	// Accounts are the node-agents' accounts.
	Accounts Accounts
	// Namespaces, when set, are the only namespaces whose runs are served
	// (the namespaces the controller's RBAC lets it read Secrets in).
	Namespaces []string
	// Audience of the node-agents' tokens (default Audience).
	Audience string
	// Addr is the address to listen on (host:port), unless Listener is set.
	Addr string
	// Listener, when set, is used instead of listening on Addr (tests).
	Listener net.Listener
	// TLS is the server's TLS configuration with its certificate
	// (Certificates or GetCertificate), unless CertFile and KeyFile are set.
	// Node-agents verify it.
	TLS *tls.Config
	// CertFile and KeyFile are a PEM certificate and key, read again when
	// they change (a mounted Secret that cert-manager or the chart renews).
	CertFile, KeyFile string
	// Log records refusals and failures; without it, the logger of Start's
	// context, if any.
	Log logr.Logger
	// SigningKeySecret, when set, is the Secret whose key
	// SigningKeyDataKey is the operator's evidence signing key: served to
	// the node-agent of an active run's node, to sign its receipt in place
	// of the node's own key.
	SigningKeySecret *types.NamespacedName
}

// Server serves runs' Secret keys and fixtures to the node-agents of the
// nodes they are bound to. It is a manager.Runnable that runs on every
// replica of the controller (it decides from the API server alone, not from
// the leader's state), so a standby answers as well as the leader.
type Server struct {
	opts Options

	mu   sync.Mutex
	addr net.Addr
	// signingKey is the operator's signing key Secret (nil: none).
	signingKey *types.NamespacedName

	// reviews bounds the TokenReviews asked at once; refused remembers
	// the tokens the API server refused for a minute (by their digest).
	reviews kubeauth.Gate
	refused map[[sha256.Size]byte]time.Time
}

// The TokenReviews the run source asks at once, in all and for one remote
// address (a node-agent's runs ask a few each; its client tries a 503
// again), and how long a refused token is answered from memory.
const (
	maxReviews        = 64
	maxReviewsPerAddr = 16
	refusedTokenTTL   = time.Minute
	maxRefusedTokens  = 4096
)

// wasRefused says whether the API server refused the token of key within
// refusedTokenTTL.
func (s *Server) wasRefused(key [sha256.Size]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.refused[key]
	return ok && time.Since(t) < refusedTokenTTL
}

// noteRefused remembers a refused token's digest; a full memory is
// emptied (refused tokens only: nothing a node-agent needs).
func (s *Server) noteRefused(key [sha256.Size]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil || len(s.refused) >= maxRefusedTokens {
		s.refused = map[[sha256.Size]byte]time.Time{}
	}
	s.refused[key] = time.Now()
}

// NewServer checks opts and makes a Server.
func NewServer(opts Options) (*Server, error) {
	if opts.Reader == nil || opts.Reviewer == nil {
		return nil, errors.New("runsource: a Reader and a Reviewer are needed")
	}
	if (opts.TLS == nil || len(opts.TLS.Certificates) == 0 && opts.TLS.GetCertificate == nil) && (opts.CertFile == "" || opts.KeyFile == "") {
		return nil, errors.New("runsource: the server needs a TLS certificate: node-agents send it their tokens")
	}
	if len(opts.Accounts.Bound) == 0 && len(opts.Accounts.Unbound) == 0 {
		return nil, errors.New("runsource: no node-agent account is named: nobody could be served")
	}
	if opts.Audience == "" {
		opts.Audience = Audience
	}
	if opts.Listener == nil && opts.Addr == "" {
		return nil, errors.New("runsource: an address to listen on is needed")
	}
	return &Server{opts: opts, signingKey: opts.SigningKeySecret, reviews: kubeauth.Gate{Max: maxReviews, PerAddr: maxReviewsPerAddr}}, nil
}

// SetSigningKeySecret names the operator's signing key Secret from now on
// (nil: none), as Options.SigningKeySecret does at start.
func (s *Server) SetSigningKeySecret(ref *types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signingKey = ref
}

// NeedLeaderElection is false: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr is the address the server listens on, once it has started.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Handler is the server's HTTP handler (without TLS: Start adds it).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathSecretKey, s.secretKey)
	mux.HandleFunc("POST "+PathFixture, s.fixture)
	mux.HandleFunc("POST "+PathSigningKey, s.signingKeyPEM)
	return mux
}

// The connections the run source holds open, in all and from one address
// (a node-agent's pod).
const (
	maxConns        = 1024
	maxConnsPerAddr = 64
)

// Start serves until ctx is done.
func (s *Server) Start(ctx context.Context) error {
	cfg := &tls.Config{}
	if s.opts.TLS != nil {
		cfg = s.opts.TLS.Clone()
	}
	logger := s.opts.Log
	if logger.GetSink() == nil {
		logger = logr.FromContextOrDiscard(ctx)
	}
	logger = logger.WithName("runsource")
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
		keys, err := certfile.Load(s.opts.CertFile, s.opts.KeyFile, logger)
		if err != nil {
			return fmt.Errorf("runsource: loading the certificate: %w", err)
		}
		cfg.GetCertificate = keys.GetCertificate
	}
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	ln := s.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.opts.Addr); err != nil {
			return fmt.Errorf("runsource: listening on %s: %w", s.opts.Addr, err)
		}
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	// Each node-agent holds a few connections (its runs' requests, kept
	// alive); the bound keeps any other client of the Service from
	// growing the controller's memory with connections it never ends.
	ln = bounded.NewListener(ln, bounded.Limits{MaxConns: maxConns, PerAddr: maxConnsPerAddr})
	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         cfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    32 << 10,
		// TLS handshakes that fail (a client that does not trust the
		// certificate) are the client's to report.
		ErrorLog:    stdlog.New(logWriter{logger}, "", 0),
		BaseContext: func(net.Listener) context.Context { return logr.NewContext(context.WithoutCancel(ctx), logger) },
	}
	logger.Info("serving runs' Secret keys and fixtures to node-agents", "address", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, cfg)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("runsource: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("runsource: %w", err)
	}
	return nil
}

func (s *Server) secretKey(w http.ResponseWriter, r *http.Request) {
	req := SecretKeyRequest{}
	who, run, ok := s.begin(w, r, &req, func() RunRef { return req.Run })
	if !ok {
		return
	}
	if !slices.ContainsFunc(run.Spec.Agent.Credentials, func(c harnessv1.Credential) bool {
		return c.SecretKeyRef.Name == req.Secret && c.SecretKeyRef.Key == req.Key
	}) && !pullSecret(run, req.Secret, req.Key) && !gitSecret(run, req.Secret, req.Key) {
		s.refuse(r.Context(), w, who, req.Run, &refusal{msg: fmt.Sprintf("run %s/%s does not select Secret %s key %s (spec.agent.credentials, the %s of spec.environment.imagePullSecrets or spec.fixture.oci.imagePullSecrets, or the %s and %s of spec.fixture.git.secretRef)", run.Namespace, run.Name, req.Secret, req.Key, DockerConfigKey, GitUsernameKey, GitPasswordKey)})
		return
	}
	sec := &corev1.Secret{}
	if err := s.opts.Reader.Get(r.Context(), types.NamespacedName{Namespace: run.Namespace, Name: req.Secret}, sec); err != nil {
		s.refuse(r.Context(), w, who, req.Run, fmt.Errorf("reading Secret %s/%s: %w", run.Namespace, req.Secret, err))
		return
	}
	v, ok := sec.Data[req.Key]
	if !ok {
		s.refuse(r.Context(), w, who, req.Run, &notFound{msg: fmt.Sprintf("Secret %s/%s has no key %q", run.Namespace, req.Secret, req.Key)})
		return
	}
	logr.FromContextOrDiscard(r.Context()).V(1).Info("served a Secret key", "node", who.Node, "run", req.Run.Namespace+"/"+req.Run.Name, "secret", req.Secret, "key", req.Key)
	writeJSON(w, http.StatusOK, SecretKeyResponse{Value: v})
}

func (s *Server) fixture(w http.ResponseWriter, r *http.Request) {
	req := FixtureRequest{}
	who, run, ok := s.begin(w, r, &req, func() RunRef { return req.Run })
	if !ok {
		return
	}
	ref := run.Spec.Fixture.ConfigMapRef
	if ref == nil {
		s.refuse(r.Context(), w, who, req.Run, &refusal{msg: fmt.Sprintf("run %s/%s names no fixture ConfigMap", run.Namespace, run.Name)})
		return
	}
	cm := &corev1.ConfigMap{}
	if err := s.opts.Reader.Get(r.Context(), types.NamespacedName{Namespace: run.Namespace, Name: ref.Name}, cm); err != nil {
		s.refuse(r.Context(), w, who, req.Run, fmt.Errorf("reading fixture ConfigMap %s/%s: %w", run.Namespace, ref.Name, err))
		return
	}
	// A ConfigMap owned by a run is evidence, written by a node-agent: it is
	// never a fixture, so that no node can plant one for another node's run.
	for _, o := range cm.OwnerReferences {
		if o.Kind == "HarnessRun" && strings.HasPrefix(o.APIVersion, harnessv1.GroupVersion.Group+"/") {
			s.refuse(r.Context(), w, who, req.Run, &refusal{msg: fmt.Sprintf("ConfigMap %s/%s is owned by HarnessRun %s (evidence), not a fixture", cm.Namespace, cm.Name, o.Name)})
			return
		}
	}
	writeJSON(w, http.StatusOK, FixtureResponse{Name: cm.Name, Data: cm.Data, BinaryData: cm.BinaryData})
}

// signingKeyPEM serves the operator's signing key to the node-agent of an
// active run's node: like a run's Secret keys, only while the run runs, so
// a node-agent never holds a standing right to it. A configured Secret that
// cannot be read is an error (the node-agent then fails the evidence step
// loudly rather than sign with another key unnoticed).
//
// Without a key the answer is the same for every caller and says nothing
// worth guarding, so it costs the API server nothing: no TokenReview, no
// read of the run. Every run's receipt asks, and that was two API requests
// per run on the path to its terminal status.
func (s *Server) signingKeyPEM(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ref := s.signingKey
	s.mu.Unlock()
	if ref == nil {
		writeJSON(w, http.StatusOK, SigningKeyResponse{})
		return
	}
	req := SigningKeyRequest{}
	who, _, ok := s.begin(w, r, &req, func() RunRef { return req.Run })
	if !ok {
		return
	}
	sec := &corev1.Secret{}
	if err := s.opts.Reader.Get(r.Context(), *ref, sec); err != nil {
		s.refuse(r.Context(), w, who, req.Run, fmt.Errorf("reading the operator's signing key Secret %s: %w", ref, err))
		return
	}
	v, ok := sec.Data[SigningKeyDataKey]
	if !ok {
		s.refuse(r.Context(), w, who, req.Run, &notFound{msg: fmt.Sprintf("the operator's signing key Secret %s has no key %q", ref, SigningKeyDataKey)})
		return
	}
	logr.FromContextOrDiscard(r.Context()).V(1).Info("served the operator's signing key", "node", who.Node, "run", req.Run.Namespace+"/"+req.Run.Name)
	writeJSON(w, http.StatusOK, SigningKeyResponse{PEM: v})
}

// begin authenticates the caller, decodes the request and checks the run it
// names is one the caller may be served for. It answers the refusals itself.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, body any, ref func() RunRef) (*Identity, *harnessv1.HarnessRun, bool) {
	ctx := r.Context()
	token, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found || token == "" {
		writeError(w, http.StatusUnauthorized, "no bearer token")
		return nil, nil, false
	}
	// Every request's token is reviewed before anything else is known of
	// its caller: a client sending made-up tokens had the run source ask
	// the API server a thousand reviews a second, as the controller. A
	// token refused within the minute is refused from memory, and the
	// reviews asked at once are bounded.
	key := sha256.Sum256([]byte(token))
	if s.wasRefused(key) {
		writeError(w, http.StatusUnauthorized, "the API server did not authenticate the token")
		return nil, nil, false
	}
	release, ok := s.reviews.Enter(r.RemoteAddr)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "too many tokens are being reviewed at once; try again later")
		return nil, nil, false
	}
	who, err := identify(ctx, s.opts.Reviewer, s.opts.Audience, token, s.opts.Accounts)
	release()
	if err != nil {
		var ae *authError
		if errors.As(err, &ae) {
			s.noteRefused(key)
		}
		s.refuse(ctx, w, nil, RunRef{}, err)
		return nil, nil, false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(body); err != nil {
		writeError(w, http.StatusBadRequest, "bad request: "+err.Error())
		return nil, nil, false
	}
	rr := ref()
	if rr.Namespace == "" || rr.Name == "" || rr.UID == "" {
		writeError(w, http.StatusBadRequest, "bad request: the run's namespace, name and uid are needed")
		return nil, nil, false
	}
	if len(s.opts.Namespaces) > 0 && !slices.Contains(s.opts.Namespaces, rr.Namespace) {
		s.refuse(ctx, w, who, rr, &refusal{msg: fmt.Sprintf("namespace %s is not one of the run namespaces this controller serves (%s)", rr.Namespace, strings.Join(s.opts.Namespaces, ", "))})
		return nil, nil, false
	}
	run := &harnessv1.HarnessRun{}
	if err := s.opts.Reader.Get(ctx, types.NamespacedName{Namespace: rr.Namespace, Name: rr.Name}, run); err != nil {
		s.refuse(ctx, w, who, rr, fmt.Errorf("reading run %s/%s: %w", rr.Namespace, rr.Name, err))
		return nil, nil, false
	}
	if err := Active(run, who.Node, rr); err != nil {
		s.refuse(ctx, w, who, rr, err)
		return nil, nil, false
	}
	return who, run, true
}

// Active says why the node's node-agent may not be served for the run as
// ref names it, or nil: the run is the one it names (UID), bound to the node,
// claimed for the attempt it names, not finished and not being deleted.
func Active(run *harnessv1.HarnessRun, node string, ref RunRef) error {
	key := run.Namespace + "/" + run.Name
	switch {
	case run.UID != ref.UID:
		return &refusal{msg: fmt.Sprintf("run %s has another uid than %s: it was deleted and made again", key, ref.UID)}
	case run.Status.NodeName != node:
		return &refusal{msg: fmt.Sprintf("run %s is bound to node %q, not to node %s", key, run.Status.NodeName, node)}
	case run.Status.Phase.Terminal():
		return &refusal{msg: fmt.Sprintf("run %s has finished (%s)", key, run.Status.Phase)}
	case run.Status.Phase != harnessv1.RunRunning:
		return &refusal{msg: fmt.Sprintf("run %s is %s: only a claimed (Running) run is served", key, run.Status.Phase)}
	case run.Status.Attempt != ref.Attempt:
		return &refusal{msg: fmt.Sprintf("run %s is at attempt %d, not %d", key, run.Status.Attempt, ref.Attempt)}
	case !run.DeletionTimestamp.IsZero():
		return &refusal{msg: fmt.Sprintf("run %s is being deleted", key)}
	}
	return nil
}

// notFound is a Secret key the Secret does not have (HTTP 404).
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }

// refuse answers err with its status code and logs it: every refusal of a
// caller is worth an operator's look.
func (s *Server) refuse(ctx context.Context, w http.ResponseWriter, who *Identity, ref RunRef, err error) {
	code := http.StatusInternalServerError
	var ae *authError
	var re *refusal
	var nf *notFound
	switch {
	case errors.As(err, &ae):
		code = http.StatusUnauthorized
	case errors.As(err, &re), apierrors.IsForbidden(err):
		code = http.StatusForbidden
	case errors.As(err, &nf), apierrors.IsNotFound(err):
		code = http.StatusNotFound
	}
	kv := []any{"status", code}
	if who != nil {
		kv = append(kv, "user", who.User, "node", who.Node)
	}
	if ref.Name != "" {
		kv = append(kv, "run", ref.Namespace+"/"+ref.Name)
	}
	logger := logr.FromContextOrDiscard(ctx)
	if code == http.StatusInternalServerError {
		logger.Error(err, "a node-agent's request failed", kv...)
	} else {
		logInfo(logger, code, err, kv)
	}
	writeError(w, code, err.Error())
}

func logInfo(logger logr.Logger, code int, err error, kv []any) {
	if code == http.StatusNotFound {
		logger.V(1).Info("a node-agent asked for something that does not exist: "+err.Error(), kv...)
		return
	}
	logger.Info("refused a node-agent's request: "+err.Error(), kv...)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorResponse{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// logWriter turns the HTTP server's own messages into debug logs.
type logWriter struct{ logger logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// DockerConfigKey is the one key of an image pull secret the run source
// serves.
const DockerConfigKey = ".dockerconfigjson"

// pullSecret reports whether the run names secret among its environment's
// or its OCI fixture's imagePullSecrets and key is the pull secret's
// document.
func pullSecret(run *harnessv1.HarnessRun, secret, key string) bool {
	if key != DockerConfigKey {
		return false
	}
	named := func(r harnessv1.LocalObjectReference) bool { return r.Name == secret }
	if e := run.Spec.Environment; e != nil && slices.ContainsFunc(e.ImagePullSecrets, named) {
		return true
	}
	o := run.Spec.Fixture.OCI
	return o != nil && slices.ContainsFunc(o.ImagePullSecrets, named)
}

// The keys of a git fixture's credentials Secret the run source serves (a
// kubernetes.io/basic-auth Secret's).
const (
	GitUsernameKey = "username"
	GitPasswordKey = "password"
)

// gitSecret reports whether secret is the run's git fixture's secretRef and
// key one of its two keys.
func gitSecret(run *harnessv1.HarnessRun, secret, key string) bool {
	g := run.Spec.Fixture.Git
	return g != nil && g.SecretRef != nil && g.SecretRef.Name == secret && (key == GitUsernameKey || key == GitPasswordKey)
}
