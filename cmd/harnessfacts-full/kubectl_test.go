package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// The connection flags are kubectl's, read as kubectl reads them: the
// kubeconfig's context, overridden by --context, --server, --token, -n.
func TestKubeFlagsAreKubectls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	// Two contexts: x, the current one, and other, which names a namespace.
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "evals"}
	cfg.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args            []string
		host, token, ns string
		wantErr         string
	}{
		{args: nil, host: "https://127.0.0.1:6443", token: "t", ns: "default"},
		{args: []string{"--context", "other"}, host: "https://127.0.0.1:6443", token: "t", ns: "evals"},
		{args: []string{"--context", "other", "-n", "mine"}, host: "https://127.0.0.1:6443", token: "t", ns: "mine"},
		{args: []string{"-s", "https://10.0.0.1:443", "--token", "other-token", "--namespace", "x"}, host: "https://10.0.0.1:443", token: "other-token", ns: "x"},
		{args: []string{"--context", "nope"}, wantErr: `context "nope" does not exist`},
	} {
		cmd := &cobra.Command{Use: "t"}
		k := newKube(cmd)
		if err := cmd.ParseFlags(append([]string{"--kubeconfig", path}, tc.args...)); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		rc, err := k.restConfig()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		ns, err := k.namespace()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if rc.Host != tc.host || rc.BearerToken != tc.token || ns != tc.ns {
			t.Errorf("%v: host %s token %q namespace %s, want %s %q %s", tc.args, rc.Host, rc.BearerToken, ns, tc.host, tc.token, tc.ns)
		}
	}
	// kubectl's other flags are there too, so a kubectl user's habits work.
	cmd := &cobra.Command{Use: "t"}
	newKube(cmd)
	for _, name := range []string{"kubeconfig", "context", "cluster", "user", "namespace", "server", "token", "as", "as-group", "as-uid", "certificate-authority", "client-certificate", "client-key", "insecure-skip-tls-verify", "tls-server-name", "request-timeout"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
}

// -o prints as kubectl prints: the kind set on a typed object, managed
// fields left out, templates with missing keys allowed; a wrong -o is an
// error before anything is printed.
func TestPrintFlagsAreKubectls(t *testing.T) {
	run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{
		Name: "hello", Namespace: "default",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	run.Status.Verdict = "Pass"
	tmpl := filepath.Join(t.TempDir(), "t.tmpl")
	if err := os.WriteFile(tmpl, []byte("{{.metadata.name}}/{{.status.verdict}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		want    string // the whole output, or with a leading ~ a part of it
		wantErr string
	}{
		{args: []string{"-o", "name"}, want: "harnessrun.harnessfacts.io/hello\n"},
		{args: []string{"-o", "jsonpath={.status.verdict}"}, want: "Pass"},
		{args: []string{"-o", "jsonpath={.spec.nothing}"}, want: ""},
		{args: []string{"-o", "jsonpath={.spec.nothing}", "--allow-missing-template-keys=false"}, wantErr: "nothing is not found"},
		{args: []string{"-o", "go-template={{.metadata.name}}"}, want: "hello"},
		{args: []string{"--template", "{{.metadata.name}}"}, want: "hello"},
		{args: []string{"-o", "jsonpath", "--template", "{.metadata.namespace}"}, want: "default"},
		{args: []string{"-o", "go-template-file=" + tmpl}, want: "hello/Pass"},
		{args: []string{"-o", "yaml"}, want: "~kind: HarnessRun"},
		{args: []string{"-o", "JSON"}, want: `~"kind": "HarnessRun"`},
		{args: []string{"-o", "table"}, wantErr: `unable to match a printer suitable for the output format "table"`},
		{args: []string{"-o", "jsonpath="}, wantErr: "no template given"},
		{args: []string{"-o", "jsonpath={.a"}, wantErr: "error parsing jsonpath"},
	} {
		cmd := &cobra.Command{Use: "t"}
		f := addPrintFlags(cmd)
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		p, err := f.printer()
		var out bytes.Buffer
		if err == nil {
			err = p.PrintObj(run.DeepCopy(), &out)
		}
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		got := out.String()
		if want, part := strings.CutPrefix(tc.want, "~"); part {
			if !strings.Contains(got, want) || strings.Contains(got, "managedFields") {
				t.Errorf("%v printed %q, want it to have %q and no managedFields", tc.args, got, want)
			}
		} else if got != tc.want {
			t.Errorf("%v printed %q, want %q", tc.args, got, tc.want)
		}
	}
}

// The binary does not link Go's plugin package: a binary that does exports
// every symbol and keeps every exported method, which once doubled this one
// through a kubectl library that links kustomize (see printFlags).
func TestBinaryDoesNotLinkPlugin(t *testing.T) {
	for _, d := range testenv.Deps(t, "github.com/harnessfacts/harnessfacts/cmd/harnessfacts-full") {
		if d == "plugin" || strings.HasPrefix(d, "sigs.k8s.io/kustomize/") {
			t.Errorf("harnessfacts-full links %s", d)
		}
	}
}
