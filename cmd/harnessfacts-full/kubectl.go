package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// runsResource is the HarnessRun resource, for the dynamic client and
// server-side printing.
var runsResource = harnessv1.GroupVersion.WithResource("harnessruns")

// kube is what a command a user runs against a cluster shares with kubectl:
// kubectl's connection flags (--kubeconfig, --context, -n, --server,
// --token, ...), bound by client-go's clientcmd and read the same way, so
// `kubectl harnessfacts ...` behaves like any kubectl command. (Not
// cli-runtime's ConfigFlags, for the reason printFlags gives.)
type kube struct {
	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides

	once   sync.Once
	config clientcmd.ClientConfig
}

// newKube adds kubectl's connection flags to cmd.
func newKube(cmd *cobra.Command) *kube {
	k := &kube{
		rules: clientcmd.NewDefaultClientConfigLoadingRules(),
		// With no kubeconfig at all, kubectl's defaults: in a pod, the
		// in-cluster config; elsewhere localhost:8080, which fails
		// loudly rather than reaching some other cluster.
		overrides: &clientcmd.ConfigOverrides{ClusterDefaults: clientcmd.ClusterDefaults},
	}
	k.rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	fs := cmd.Flags()
	fs.StringVar(&k.rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl has it
	clientcmd.BindOverrideFlags(k.overrides, fs, names)
	return k
}

// clientConfig is the kubeconfig as the flags select and override it, read
// once per command.
func (k *kube) clientConfig() clientcmd.ClientConfig {
	k.once.Do(func() {
		k.config = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(k.rules, k.overrides)
	})
	return k.config
}

// namespace is -n, else the kubeconfig context's namespace, else default.
func (k *kube) namespace() (string, error) {
	ns, _, err := k.clientConfig().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

func (k *kube) restConfig() (*rest.Config, error) {
	cfg, err := k.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the cluster (--kubeconfig, --context, $KUBECONFIG or in-cluster): %w", err)
	}
	return cfg, nil
}

// client is a direct (uncached) client for the harnessfacts.io and
// built-in types, and the namespace to work in.
func (k *kube) client() (client.WithWatch, string, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, "", err
	}
	ns, err := k.namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: clusterScheme()})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

func (k *kube) dynamic() (dynamic.Interface, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

// tableAccept asks the API server for a Table built from the CRD's printer
// columns, as kubectl get does.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// serverTable gets the runs (all of the namespace when names is empty) as a
// server-side Table, with each row's object metadata decoded (the printer
// needs it for the namespace column).
func (k *kube) serverTable(ctx context.Context, namespace string, gvr schema.GroupVersionResource, name, selector string) (*metav1.Table, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	gv := gvr.GroupVersion()
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req := rc.Get().Resource(gvr.Resource).SetHeader("Accept", tableAccept)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	if name != "" {
		req = req.Name(name)
	}
	if selector != "" {
		req = req.Param("labelSelector", selector)
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(raw, table); err != nil {
		return nil, fmt.Errorf("decoding the server's table: %w", err)
	}
	if table.Kind != "Table" {
		return nil, fmt.Errorf("the API server answered %s, not a Table", table.Kind)
	}
	for i := range table.Rows {
		if raw := table.Rows[i].Object.Raw; len(raw) > 0 {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(raw); err == nil {
				table.Rows[i].Object.Object = u
			}
		}
	}
	return table, nil
}

// output is kubectl's -o for a command that acts on runs (wait, cancel,
// retry), as `kubectl wait`, `kubectl patch` and `kubectl create` have it:
// name, yaml, json, jsonpath=..., go-template=... print each run the
// command acted on; without -o the command says what it did in words.
type output struct {
	flags *printFlags
}

// newOutput adds -o (and --template) to cmd.
func newOutput(cmd *cobra.Command) *output {
	return &output{flags: addPrintFlags(cmd)}
}

// printer is the printer -o asks for, or nil without -o. Commands ask for it
// before they change anything, so a wrong -o changes nothing.
func (o *output) printer() (printers.ResourcePrinter, error) {
	switch o.flags.outputFormat() {
	case "":
		return nil, nil
	case "wide":
		return nil, errors.New("output format -o wide is for tables; this command prints the runs it acted on: -o name|yaml|json|jsonpath=TEMPLATE|go-template=TEMPLATE")
	}
	return o.flags.printer()
}
