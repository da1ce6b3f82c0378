// Package kube is the node-agent's client of the Kubernetes API: a typed
// client of the few API groups it uses (HarnessFacts', core, coordination,
// events, authentication, authorization) over client-go's REST client, a
// cache fed by client-go's informers, and an Event recorder.
//
// Why not controller-runtime's client, as the controller uses: it imports
// client-go's scheme of every API group, whose types and code, paged in at
// start, were most of an idle node-agent's memory (docs/performance.md). A
// node-agent runs on every node; the controller runs once and keeps
// controller-runtime. The calls keep controller-runtime's shapes (Get,
// Create, Update, Patch, Status().Update) so that code reads the same on
// both sides.
package kube

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Object is an object of Scheme.
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of objects of Scheme.
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// Scheme holds the types the node-agent reads and writes, and no others.
var Scheme = runtime.NewScheme()

var codecs serializer.CodecFactory

func init() {
	for _, add := range []func(*runtime.Scheme) error{harnessv1.AddToScheme, corev1.AddToScheme, coordinationv1.AddToScheme,
		eventsv1.AddToScheme, authenticationv1.AddToScheme, authorizationv1.AddToScheme} {
		utilruntime.Must(add(Scheme))
	}
	codecs = serializer.NewCodecFactory(Scheme)
}

// Client reads and writes objects of Scheme straight from the API server.
type Client struct {
	rest map[schema.GroupVersion]*rest.RESTClient
}

// New makes a Client of cfg; its group versions share one HTTP client (and
// so one connection pool).
func New(cfg *rest.Config) (*Client, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client of the API server: %w", err)
	}
	return NewWithHTTPClient(cfg, httpClient)
}

// NewWithHTTPClient makes a Client of cfg over httpClient.
func NewWithHTTPClient(cfg *rest.Config, httpClient *http.Client) (*Client, error) {
	c := &Client{rest: map[schema.GroupVersion]*rest.RESTClient{}}
	for gvk := range Scheme.AllKnownTypes() {
		gv := gvk.GroupVersion()
		if _, ok := c.rest[gv]; ok || gv.Version == runtime.APIVersionInternal {
			continue
		}
		cc := rest.CopyConfig(cfg)
		cc.GroupVersion = &gv
		cc.APIPath = "/apis"
		if gv.Group == "" {
			cc.APIPath = "/api"
		}
		cc.NegotiatedSerializer = codecs.WithoutConversion()
		if cc.UserAgent == "" {
			cc.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientForConfigAndClient(cc, httpClient)
		if err != nil {
			return nil, fmt.Errorf("a client of %s: %w", gv, err)
		}
		c.rest[gv] = rc
	}
	return c, nil
}

// target is where obj's kind is served.
type target struct {
	client   *rest.RESTClient
	resource string
}

func (c *Client) target(obj runtime.Object) (target, error) {
	gvks, _, err := Scheme.ObjectKinds(obj)
	if err != nil {
		return target{}, err
	}
	gvk := gvks[0]
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	rc := c.rest[gvk.GroupVersion()]
	if rc == nil {
		return target{}, fmt.Errorf("no client of %s", gvk.GroupVersion())
	}
	// Every kind the node-agent uses has its resource's regular plural.
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return target{client: rc, resource: plural.Resource}, nil
}

// Get reads the object key names into obj.
func (c *Client) Get(ctx context.Context, key types.NamespacedName, obj Object) error {
	t, err := c.target(obj)
	if err != nil {
		return err
	}
	return t.client.Get().NamespaceIfScoped(key.Namespace, key.Namespace != "").Resource(t.resource).Name(key.Name).
		Do(ctx).Into(obj)
}

// List reads the objects of list's kind in namespace (every namespace when
// empty) that opts select into list.
func (c *Client) List(ctx context.Context, namespace string, list ObjectList, opts metav1.ListOptions) error {
	t, err := c.target(list)
	if err != nil {
		return err
	}
	return t.client.Get().NamespaceIfScoped(namespace, namespace != "").Resource(t.resource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
}

// Watch watches the objects of list's kind in namespace that opts select.
func (c *Client) Watch(ctx context.Context, namespace string, list ObjectList, opts metav1.ListOptions) (watch.Interface, error) {
	t, err := c.target(list)
	if err != nil {
		return nil, err
	}
	opts.Watch = true
	return t.client.Get().NamespaceIfScoped(namespace, namespace != "").Resource(t.resource).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Create creates obj and reads back what the API server made of it.
func (c *Client) Create(ctx context.Context, obj Object) error {
	t, err := c.target(obj)
	if err != nil {
		return err
	}
	ns := obj.GetNamespace()
	return t.client.Post().NamespaceIfScoped(ns, ns != "").Resource(t.resource).Body(obj).Do(ctx).Into(obj)
}

// Update replaces obj (but for its status) if its resourceVersion is still
// the API server's.
func (c *Client) Update(ctx context.Context, obj Object) error {
	return c.put(ctx, obj, "")
}

// Patch applies patch to obj and reads back the result into obj.
func (c *Client) Patch(ctx context.Context, obj Object, patch Patch) error {
	return c.patch(ctx, obj, patch, "")
}

// CreateSubResource creates body as obj's subresource (a ServiceAccount's
// token) and reads the answer back into body.
func (c *Client) CreateSubResource(ctx context.Context, obj Object, subresource string, body runtime.Object) error {
	t, err := c.target(obj)
	if err != nil {
		return err
	}
	ns := obj.GetNamespace()
	return t.client.Post().NamespaceIfScoped(ns, ns != "").Resource(t.resource).Name(obj.GetName()).
		SubResource(subresource).Body(body).Do(ctx).Into(body)
}

// Status writes objects' status subresource.
func (c *Client) Status() StatusWriter { return StatusWriter{c} }

// StatusWriter writes objects' status subresource.
type StatusWriter struct{ c *Client }

// Update replaces obj's status if its resourceVersion is still the API
// server's.
func (w StatusWriter) Update(ctx context.Context, obj Object) error {
	return w.c.put(ctx, obj, "status")
}

// Patch applies patch to obj's status and reads back the result into obj.
func (w StatusWriter) Patch(ctx context.Context, obj Object, patch Patch) error {
	return w.c.patch(ctx, obj, patch, "status")
}

func (c *Client) put(ctx context.Context, obj Object, subresource string) error {
	t, err := c.target(obj)
	if err != nil {
		return err
	}
	ns := obj.GetNamespace()
	r := t.client.Put().NamespaceIfScoped(ns, ns != "").Resource(t.resource).Name(obj.GetName())
	if subresource != "" {
		r = r.SubResource(subresource)
	}
	return r.Body(obj).Do(ctx).Into(obj)
}

func (c *Client) patch(ctx context.Context, obj Object, patch Patch, subresource string) error {
	t, err := c.target(obj)
	if err != nil {
		return err
	}
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	ns := obj.GetNamespace()
	r := t.client.Patch(types.MergePatchType).NamespaceIfScoped(ns, ns != "").Resource(t.resource).Name(obj.GetName())
	if subresource != "" {
		r = r.SubResource(subresource)
	}
	return r.Body(data).Do(ctx).Into(obj)
}
