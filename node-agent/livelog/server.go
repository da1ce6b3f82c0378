package livelog

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
)

// The resource a follower must be allowed: verb get on harnessruns/log in
// the run's namespace, as `kubectl logs` needs get on pods/log.
const (
	Verb        = "get"
	Resource    = "harnessruns"
	Subresource = "log"
)

// Bounds of the server. A follower is the run author's own terminal: one
// user's followers, or one that stopped reading (`logs -f | less` left
// open), must not keep every other user of the node out.
const (
	// MaxConnections bounds the requests one node-agent serves at once.
	MaxConnections = 64
	// MaxPerUser bounds the requests of one user (as the API server named
	// them) at once.
	MaxPerUser = 16
	// DefaultWriteTimeout is how long one write to a follower may wait for
	// it to read before the stream is cut off.
	DefaultWriteTimeout = 30 * time.Second
)

// Path is the URL path of a run's output: /runs/NAMESPACE/NAME/log;
// ?follow=true streams it until the agent ends.
func Path(namespace, name string) string {
	return "/runs/" + namespace + "/" + name + "/log"
}

// Server serves a Hub's streams over HTTPS to callers the API server
// authenticates (a bearer token through a TokenReview, or a client
// certificate signed by the cluster's client CA) and authorizes (a
// SubjectAccessReview for get on harnessruns/log of the run), as the kubelet
// does for its own API, keeping the answers as long as the kubelet does
// (see kubeauth). Only redacted bytes are ever in a Hub.
type Server struct {
	// Hub holds the streams.
	Hub *Hub
	// Reviews creates TokenReviews and SubjectAccessReviews.
	Reviews client.Client
	// ClientCAs verify client certificates; nil accepts bearer tokens only.
	ClientCAs *x509.CertPool
	// Certificate is the server's certificate.
	Certificate tls.Certificate
	// Log records refusals and errors.
	Log logr.Logger
	// WriteTimeout is DefaultWriteTimeout when 0.
	WriteTimeout time.Duration

	slots    chan struct{}
	mu       sync.Mutex
	perUser  map[string]int
	reviewer *kubeauth.Reviewer
}

// TLSConfig is the server's TLS configuration: its certificate, TLS 1.2 or
// later, and client certificates verified against ClientCAs when given.
func (s *Server) TLSConfig() *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{s.Certificate}, MinVersion: tls.VersionTLS12, ClientAuth: tls.NoClientCert}
	if s.ClientCAs != nil {
		cfg.ClientAuth, cfg.ClientCAs = tls.VerifyClientCertIfGiven, s.ClientCAs
	}
	return cfg
}

// Handler is the HTTP handler of the log endpoint.
func (s *Server) Handler() http.Handler {
	if s.slots == nil {
		s.slots = make(chan struct{}, MaxConnections)
		s.perUser = map[string]int{}
	}
	if s.reviewer == nil {
		s.reviewer = &kubeauth.Reviewer{Client: s.Reviews, ClientCAs: s.ClientCAs}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /runs/{namespace}/{name}/log", s.serveLog)
	return mux
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), TLSConfig: s.TLSConfig(), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) serveLog(w http.ResponseWriter, r *http.Request) {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		http.Error(w, "the node-agent serves too many log streams; try again later", http.StatusServiceUnavailable)
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	who, status, err := s.reviewer.Authenticate(r)
	if err != nil {
		s.Log.Info("refused a log request", "run", ns+"/"+name, "status", status, "reason", err.Error(), "remote", r.RemoteAddr)
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="harnessfacts node-agent"`)
		}
		http.Error(w, err.Error(), status)
		return
	}
	if status, err := s.authorize(r.Context(), who, ns, name); err != nil {
		s.Log.Info("refused a log request", "run", ns+"/"+name, "user", who.Name, "status", status, "reason", err.Error())
		http.Error(w, err.Error(), status)
		return
	}
	if !s.takeUserSlot(who.Name) {
		http.Error(w, fmt.Sprintf("user %q has %d log requests open on this node, the most one user may", who.Name, MaxPerUser), http.StatusTooManyRequests)
		return
	}
	defer s.releaseUserSlot(who.Name)
	// Every write waits for the follower at most this long: one that
	// stopped reading is cut off, and gives its slots back.
	rc := http.NewResponseController(w)
	timeout := cmp.Or(s.WriteTimeout, DefaultWriteTimeout)
	deadline := func() { _ = rc.SetWriteDeadline(time.Now().Add(timeout)) }
	stream, ok := s.Hub.Lookup(ns, name)
	if !ok {
		http.Error(w, fmt.Sprintf("HarnessRun %s/%s is not running on this node: it has not started or has ended (a finished run's output is in its evidence: harnessfacts logs %s)", ns, name, name), http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-HarnessFacts-Run-UID", string(stream.UID))
	h.Set("X-HarnessFacts-Attempt", fmt.Sprint(stream.Attempt))
	if r.URL.Query().Get("follow") != "true" {
		deadline()
		_, _ = w.Write(stream.Snapshot())
		return
	}
	f, err := stream.Follow()
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer f.Close()
	deadline()
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for {
		b, done, err := f.Next(r.Context())
		if err != nil || done {
			return
		}
		deadline()
		if _, err := w.Write(b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// takeUserSlot counts one more request of user, unless they have
// MaxPerUser.
func (s *Server) takeUserSlot(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUser[user] >= MaxPerUser {
		return false
	}
	s.perUser[user]++
	return true
}

func (s *Server) releaseUserSlot(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUser[user]--; s.perUser[user] <= 0 {
		delete(s.perUser, user)
	}
}

// authorize asks the API server whether who may get harnessruns/log of the
// run.
func (s *Server) authorize(ctx context.Context, who kubeauth.User, ns, name string) (int, error) {
	allowed, reason, err := s.reviewer.Authorize(ctx, who, authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: Verb, Group: harnessv1.GroupVersion.Group,
			Resource: Resource, Subresource: Subresource, Name: name}})
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	if !allowed {
		msg := fmt.Sprintf("user %q may not %s %s/%s of HarnessRun %s/%s", who.Name, Verb, Resource, Subresource, ns, name)
		if reason != "" {
			msg += ": " + reason
		}
		return http.StatusForbidden, errors.New(msg)
	}
	return 0, nil
}

// ClusterClientCA reads the cluster's client CA from the ConfigMap
// kube-system/extension-apiserver-authentication (key client-ca-file), which
// the API server publishes for servers that authenticate its users, as
// aggregated API servers and metrics-server do.
func ClusterClientCA(ctx context.Context, r client.Reader) (*x509.CertPool, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, cm); err != nil {
		return nil, err
	}
	pem := cm.Data["client-ca-file"]
	if pem == "" {
		return nil, errors.New("kube-system/extension-apiserver-authentication has no client-ca-file")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(pem)) {
		return nil, errors.New("kube-system/extension-apiserver-authentication: client-ca-file holds no certificate")
	}
	return pool, nil
}
