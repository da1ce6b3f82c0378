package kubeauth

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// Middleware answers only callers whose bearer token (or client
// certificate) the API server accepts and who may use the request's verb
// on its non-resource path (get on /metrics, as the chart's metrics-reader
// ClusterRole grants), as controller-runtime's
// filters.WithAuthenticationAndAuthorization does; it passes the others'
// requests to next. Refusals: 401 with a WWW-Authenticate header for
// missing or refused credentials, 403 for a caller without the right, 503
// when the API server could not be asked.
func (rv *Reviewer) Middleware(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, status, err := rv.Authenticate(r)
		if err != nil {
			log.V(4).Info("refused a metrics request", "status", status, "reason", err.Error(), "remote", r.RemoteAddr)
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="harnessfacts metrics"`)
			}
			http.Error(w, http.StatusText(status), status)
			return
		}
		verb := strings.ToLower(r.Method)
		allowed, reason, err := rv.Authorize(r.Context(), u, authorizationv1.SubjectAccessReviewSpec{
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: verb}})
		if err != nil {
			log.Error(err, "a metrics request could not be authorized", "user", u.Name)
			http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
			return
		}
		if !allowed {
			log.V(4).Info("refused a metrics request", "user", u.Name, "verb", verb, "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("user %q may not %s %s", u.Name, verb, r.URL.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
