package testing

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MetricsReaders makes two service accounts in namespace ns, the one named
// reader bound (through a ClusterRole named role, as the chart's
// metrics-reader) to get on the non-resource URL /metrics, the one named
// nosy allowed nothing, and returns an hour's token of each, as a
// Prometheus and a stranger would hold them.
func MetricsReaders(ctx context.Context, c client.Client, cfg *rest.Config, ns, role, reader, nosy string) (readerToken, nosyToken string, err error) {
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + reader},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: reader, Namespace: ns}}}
	for _, o := range []client.Object{cr, binding,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reader, Namespace: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: nosy, Namespace: ns}}} {
		if err := c.Create(ctx, o); err != nil {
			return "", "", fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", "", err
	}
	token := func(sa string) (string, error) {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("a token of %s/%s: %w", ns, sa, err)
		}
		return tr.Status.Token, nil
	}
	if readerToken, err = token(reader); err != nil {
		return "", "", err
	}
	nosyToken, err = token(nosy)
	return readerToken, nosyToken, err
}
