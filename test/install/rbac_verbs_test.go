package install

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/rbac-verbs.txt from what the API server answers")

// TestServiceAccountVerbs installs the chart's RBAC (with runNamespaces set,
// the stricter layout, and with the default) and asks the real API server,
// as each of the chart's service accounts and as the editor and viewer roles'
// users, every verb it holds in the install namespace, in a run namespace,
// and in another namespace (SelfSubjectRulesReview). The answer must equal
// testdata/rbac-verbs.txt, checked in: a new right shows up in review as a
// change of that file. Run with -args -update to rewrite it.
func TestServiceAccountVerbs(t *testing.T) {
	ctx := context.Background()
	var got []string
	for _, layout := range []struct{ release, values string }{
		{"verbs", ""},
		{"verbsns", "runNamespaces: [verbsns-runs]"},
	} {
		namespace, runsNS, other := layout.release+"-system", layout.release+"-runs", layout.release+"-other"
		m := mustRender(t, layout.release, namespace, layout.values)
		for _, ns := range []string{namespace, runsNS, other} {
			createNamespace(t, ns)
		}
		access := m.only("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
		if _, err := runKubectl(access.yaml(t), "apply", "--server-side", "--field-manager=harnessfacts-install-test", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		// People get the user roles through a binding an operator makes.
		editor, viewer := layout.release+"-editor-user", layout.release+"-viewer-user"
		for user, role := range map[string]string{editor: layout.release + "-harnessfacts-editor", viewer: layout.release + "-harnessfacts-viewer"} {
			if _, err := runKubectl("", "create", "rolebinding", user, "-n", runsNS, "--clusterrole="+role, "--user="+user); err != nil {
				t.Fatal(err)
			}
		}
		identities := map[string]rest.ImpersonationConfig{}
		for _, sa := range []string{"controller", "node-agent"} {
			name := layout.release + "-harnessfacts-" + sa
			identities[sa] = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
		}
		identities["editor"] = rest.ImpersonationConfig{UserName: editor, Groups: []string{"system:authenticated"}}
		identities["viewer"] = rest.ImpersonationConfig{UserName: viewer, Groups: []string{"system:authenticated"}}
		for who, imp := range identities {
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = imp
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for scope, ns := range map[string]string{"install": namespace, "runs": runsNS, "other": other} {
				r, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
					&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status.Incomplete {
					t.Fatalf("the rules review of %s in %s is incomplete: %s", who, ns, r.Status.EvaluationError)
				}
				for _, rule := range r.Status.ResourceRules {
					for _, g := range rule.APIGroups {
						for _, res := range rule.Resources {
							if isDefaultRule(g, res) {
								continue
							}
							verbs := slices.Clone(rule.Verbs)
							slices.Sort(verbs)
							names := ""
							if len(rule.ResourceNames) > 0 {
								names = " names=" + strings.Join(rule.ResourceNames, ",")
							}
							got = append(got, fmt.Sprintf("%s %s %s in %s: %s%s", layout.release, who, groupResource(g, res), scope, strings.Join(verbs, ","), names))
						}
					}
				}
			}
		}
	}
	slices.Sort(got)
	got = slices.Compact(got)
	golden := filepath.Join("testdata", "rbac-verbs.txt")
	text := "# Every verb each identity holds, as the API server answers a\n" +
		"# SelfSubjectRulesReview (test/install/rbac_verbs_test.go): release verbs is\n" +
		"# the chart's default, verbsns sets runNamespaces.\n" +
		"# Regenerate with: go test ./test/install -run TestServiceAccountVerbs -args -update\n" +
		strings.Join(got, "\n") + "\n"
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with -args -update, and review it)", err)
	}
	if diff := cmp.Diff(string(want), text); diff != "" {
		t.Errorf("the identities' rights differ from %s (-checked in +now):\n%s", golden, diff)
	}
}

// isDefaultRule is a rule the API server's default roles give every
// authenticated user or service account (self reviews, trust bundles): not
// the chart's doing.
func isDefaultRule(group, resource string) bool {
	return group == "authorization.k8s.io" && strings.HasPrefix(resource, "self") ||
		group == "authentication.k8s.io" && resource == "selfsubjectreviews" ||
		group == "certificates.k8s.io" && resource == "clustertrustbundles"
}

func groupResource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}
