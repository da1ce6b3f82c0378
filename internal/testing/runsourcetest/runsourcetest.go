// Package runsourcetest wires the Secret path for tests as a cluster has it:
// the controller's runsource.Server over TLS (a self-signed certificate on
// 127.0.0.1), and for each node a node-agent Pod object (no kubelet runs it
// here) whose service account token, bound to that Pod and to the
// controller's audience, is what the node-agent presents. The API server
// issues and reviews the tokens for real.
package runsourcetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/runsource"
)

// ServiceAccount is the node-agents' account in the tests, as the chart names it.
const ServiceAccount = "harnessfacts-node-agent"

// Path is a running Server and the means to make node-agents' clients of it.
type Path struct {
	// URL and CA are what a node-agent is given (--controller-url, --controller-ca).
	URL string
	CA  []byte

	admin     client.Client
	namespace string
	account   string
	certDir   string
	server    *runsource.Server

	mu   sync.Mutex
	pods map[string]*corev1.Pod
}

// Add adds the Server to the controller's manager mgr (as the controller
// command does), serving node-agents of the account ServiceAccount in
// namespace. admin makes the account, the Pods and the tokens.
func Add(ctx context.Context, mgr manager.Manager, admin client.Client, namespace string) (*Path, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// The server reads and reviews with the manager's identity, as the
	// controller command's does.
	api, err := kube.NewWithHTTPClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	p, srv, err := newServer(ctx, ln, api, admin, namespace)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	if err := mgr.Add(srv); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return p, nil
}

// Start runs the Server on its own until ctx is done, for tests without a
// controller manager; it reads and reviews with cfg's identity.
func Start(ctx context.Context, cfg *rest.Config, admin client.Client, namespace string) (*Path, error) {
	api, err := kube.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p, srv, err := newServer(ctx, ln, api, admin, namespace)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	go func() { _ = srv.Start(ctx) }()
	return p, nil
}

func newServer(ctx context.Context, ln net.Listener, api *kube.Client, admin client.Client, namespace string) (*Path, *runsource.Server, error) {
	certPEM, keyPEM, err := runsource.SelfSigned("127.0.0.1")
	if err != nil {
		return nil, nil, err
	}
	tlsCfg, err := runsource.TLSConfig(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ServiceAccount}}
	if err := admin.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, nil, fmt.Errorf("making the node-agents' service account: %w", err)
	}
	srv, err := runsource.NewServer(runsource.Options{
		Reader: api, Reviewer: api, Listener: ln, TLS: tlsCfg, Log: log.Log,
		Accounts: runsource.Accounts{Bound: []string{"system:serviceaccount:" + namespace + ":" + ServiceAccount}},
	})
	if err != nil {
		return nil, nil, err
	}
	return &Path{URL: "https://" + ln.Addr().String(), CA: certPEM, admin: admin, namespace: namespace, account: ServiceAccount, pods: map[string]*corev1.Pod{}, server: srv}, srv, nil
}

// SetSigningKeySecret names the operator's evidence signing key Secret the
// server serves from now on (nil: none), as the controller's
// --evidence-signing-key-secret does.
func (p *Path) SetSigningKeySecret(ref *types.NamespacedName) { p.server.SetSigningKeySecret(ref) }

// Token is the token source of the node-agent on node: a token bound to that
// node's node-agent Pod, made on first use.
func (p *Path) Token(ctx context.Context, node string) (*runsource.RequestedToken, error) {
	pod, err := p.pod(ctx, node)
	if err != nil {
		return nil, err
	}
	return &runsource.RequestedToken{Client: tokens{p.admin}, ServiceAccount: client.ObjectKey{Namespace: p.namespace, Name: p.account},
		Bound: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}, nil
}

// tokens requests tokens with the tests' administrator client.
type tokens struct{ admin client.Client }

func (t tokens) CreateSubResource(ctx context.Context, obj kube.Object, subresource string, body runtime.Object) error {
	b, ok := body.(client.Object)
	if !ok {
		return fmt.Errorf("%T is not an object", body)
	}
	return t.admin.SubResource(subresource).Create(ctx, obj, b)
}

// Client is the node-agent of node's client.
func (p *Path) Client(ctx context.Context, node string) (*runsource.Client, error) {
	tok, err := p.Token(ctx, node)
	if err != nil {
		return nil, err
	}
	return runsource.NewClient(p.URL, p.CA, tok)
}

// pod is node's node-agent Pod, made once.
func (p *Path) pod(ctx context.Context, node string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pod := p.pods[node]; pod != nil {
		return pod, nil
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, GenerateName: "node-agent-"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: p.account,
			Containers: []corev1.Container{{Name: "node-agent", Image: "harnessfacts-node-agent"}}},
	}
	if err := p.admin.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("making the node-agent Pod of node %s: %w", node, err)
	}
	p.pods[node] = pod
	return pod, nil
}

// Flags writes node's token (valid for an hour) and the CA into dir and
// returns the node-agent command's flags that use them.
func (p *Path) Flags(ctx context.Context, node, dir string) ([]string, error) {
	tok, err := p.Token(ctx, node)
	if err != nil {
		return nil, err
	}
	tok.Lifetime = time.Hour
	t, err := tok.Token(ctx)
	if err != nil {
		return nil, err
	}
	tokenFile, caFile := filepath.Join(dir, "controller-token"), filepath.Join(dir, "controller-ca.crt")
	if err := os.WriteFile(tokenFile, []byte(t), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(caFile, p.CA, 0o600); err != nil {
		return nil, err
	}
	return []string{"--controller-url", p.URL, "--controller-ca", caFile, "--controller-token", tokenFile}, nil
}

// ForBinaries prepares the Secret path for a controller and node-agents run
// as processes: a certificate in dir for the controller's
// --run-source-cert-dir, the server's address addr (picked with the
// test's other addresses by freeaddr.Loopback: a port picked alone and
// closed was handed to the next pick, and the controller was refused it),
// the node-agents' account (account, ServiceAccount when empty, made if
// missing). ControllerArgs and Flags give their flags.
func ForBinaries(ctx context.Context, admin client.Client, namespace, account, addr, dir string) (*Path, error) {
	if account == "" {
		account = ServiceAccount
	}
	certPEM, keyPEM, err := runsource.SelfSigned("127.0.0.1")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: account}}
	if err := admin.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("making the node-agents' service account: %w", err)
	}
	return &Path{URL: "https://" + addr, CA: certPEM, admin: admin, namespace: namespace, account: account, pods: map[string]*corev1.Pod{}, certDir: dir}, nil
}

// ControllerArgs are the controller command's flags of a Path made by
// ForBinaries.
func (p *Path) ControllerArgs() []string {
	return []string{"--run-source-bind-address", strings.TrimPrefix(p.URL, "https://"), "--run-source-cert-dir", p.certDir,
		"--node-agent-service-account", p.namespace + "/" + p.account}
}
