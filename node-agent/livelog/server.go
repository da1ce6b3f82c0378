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

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
	"github.com/harnessfacts/harnessfacts/node-agent/bounded"
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
	// MaxConnections bounds the requests one node-agent serves at once,
	// and, apart, the requests whose caller is being reviewed (a token
	// made up costs the API server a TokenReview).
	MaxConnections = 64
	// MaxPerUser bounds the requests of one user (as the API server named
	// them) at once, and MaxPerNamespace those for runs of one namespace,
	// whose admin can make as many ServiceAccounts as they like.
	MaxPerUser      = 16
	MaxPerNamespace = 32
	// MaxFollowersPerUser bounds one user's followers of one run: a run
	// has MaxFollowers, and one user with harnessruns/log (the viewer
	// role) held all of them, shutting the run's author out.
	MaxFollowersPerUser = MaxFollowers / 2
	// MaxReviewsPerAddress bounds the requests from one address being
	// reviewed at once: one source of made-up tokens, against a slow API
	// server, cannot hold every review slot.
	MaxReviewsPerAddress = 8
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
	// Reviews creates TokenReviews and SubjectAccessReviews (a
	// *kube.Client).
	Reviews kubeauth.Creator
	// ClientCAs verify client certificates; nil accepts bearer tokens only.
	ClientCAs *x509.CertPool
	// Certificate is the server's certificate.
	Certificate tls.Certificate
	// Log records refusals and errors.
	Log logr.Logger
	// WriteTimeout is DefaultWriteTimeout when 0.
	WriteTimeout time.Duration

	slots          chan struct{}
	reviews        kubeauth.Gate // the callers being reviewed (TokenReview and SubjectAccessReview)
	mu             sync.Mutex
	perUser, perNS map[string]int
	followersOf    map[string]int // by run and user
	reviewer       *kubeauth.Reviewer
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
		s.reviews = kubeauth.Gate{Max: MaxConnections, PerAddr: MaxReviewsPerAddress}
		s.perUser, s.perNS, s.followersOf = map[string]int{}, map[string]int{}, map[string]int{}
	}
	if s.reviewer == nil {
		s.reviewer = &kubeauth.Reviewer{Client: s.Reviews, ClientCAs: s.ClientCAs}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /runs/{namespace}/{name}/log", s.serveLog)
	return mux
}

// The live output server's bounds before a request is read: its header
// block's size, and the connections it holds open, in all and from one
// address. A follower holds one connection; the handler's own bounds
// (MaxConnections streams, per user and per run) are below these, and one
// address may hold twice the streams (users behind one NAT address).
const (
	MaxHeaderBytes       = 32 << 10
	ListenerConns        = 512
	ListenerConnsPerAddr = 2 * MaxConnections
)

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	// Every bound below the handler (slots, reviews per address and per
	// user) starts once a request's headers are read; these hold before:
	// a header block of at most 32 KiB (a bearer token needs a few), at
	// most ListenerConns connections, ListenerConnsPerAddr from one
	// address, and no HTTP/2 (one connection, many streams). Without them
	// 600 connections each sending 1 MB of one unfinished header, no
	// credential needed, ran the node-agent out of memory, and every run
	// on its node with it.
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	srv := &http.Server{Handler: s.Handler(), TLSConfig: s.TLSConfig(), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: MaxHeaderBytes, Protocols: protocols,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	bl := bounded.NewListener(l, bounded.Limits{MaxConns: ListenerConns, PerAddr: ListenerConnsPerAddr})
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(bl, "", "") }()
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
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	who, status, err := s.review(r, ns, name)
	if err != nil {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="harnessfacts node-agent"`)
		}
		http.Error(w, err.Error(), status)
		return
	}
	// A slot is taken once the caller is known and allowed: a stream's,
	// the node's, its user's and its namespace's.
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		http.Error(w, "the node-agent serves too many log streams; try again later", http.StatusServiceUnavailable)
		return
	}
	if why := s.take(who.Name, ns); why != "" {
		http.Error(w, why, http.StatusTooManyRequests)
		return
	}
	defer s.release(who.Name, ns)
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
	if why := s.takeFollower(who.Name, ns, name); why != "" {
		http.Error(w, why, http.StatusTooManyRequests)
		return
	}
	defer s.releaseFollower(who.Name, ns, name)
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

// review authenticates the caller and asks whether they may read the run's
// log, holding one of the reviews' own slots meanwhile: a burst of callers
// with made-up tokens waits on the API server without taking the streams'.
func (s *Server) review(r *http.Request, ns, name string) (kubeauth.User, int, error) {
	release, ok := s.reviews.Enter(r.RemoteAddr)
	if !ok {
		return kubeauth.User{}, http.StatusServiceUnavailable, errors.New("the node-agent is reviewing too many log requests; try again later")
	}
	defer release()
	who, status, err := s.reviewer.Authenticate(r)
	if err != nil {
		s.Log.Info("refused a log request", "run", ns+"/"+name, "status", status, "reason", err.Error(), "remote", r.RemoteAddr)
		return who, status, err
	}
	if status, err := s.authorize(r.Context(), who, ns, name); err != nil {
		s.Log.Info("refused a log request", "run", ns+"/"+name, "user", who.Name, "status", status, "reason", err.Error())
		return who, status, err
	}
	return who, 0, nil
}

// takeFollower counts one more follower of run ns/name by user, or says why
// not.
func (s *Server) takeFollower(user, ns, name string) string {
	key := ns + "/" + name + "\x00" + user
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.followersOf[key] >= MaxFollowersPerUser {
		return fmt.Sprintf("user %q follows run %s/%s %d times, the most one user may", user, ns, name, MaxFollowersPerUser)
	}
	s.followersOf[key]++
	return ""
}

func (s *Server) releaseFollower(user, ns, name string) {
	key := ns + "/" + name + "\x00" + user
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.followersOf[key]--; s.followersOf[key] <= 0 {
		delete(s.followersOf, key)
	}
}

// take counts one more request of user for a run in ns, or says why not.
func (s *Server) take(user, ns string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.perUser[user] >= MaxPerUser:
		return fmt.Sprintf("user %q has %d log requests open on this node, the most one user may", user, MaxPerUser)
	case s.perNS[ns] >= MaxPerNamespace:
		return fmt.Sprintf("namespace %q has %d log requests open on this node, the most one namespace may", ns, MaxPerNamespace)
	}
	s.perUser[user]++
	s.perNS[ns]++
	return ""
}

func (s *Server) release(user, ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUser[user]--; s.perUser[user] <= 0 {
		delete(s.perUser, user)
	}
	if s.perNS[ns]--; s.perNS[ns] <= 0 {
		delete(s.perNS, ns)
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
func ClusterClientCA(ctx context.Context, r *kube.Client) (*x509.CertPool, error) {
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
