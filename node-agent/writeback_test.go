package nodeagent_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestOutcomeOutlivesFailedWrites: the API server answers the first writes
// of an attempt's outcome (its evidence ConfigMap, its terminal status)
// with 500, as it does while a webhook on them is down or etcd elects a
// leader. The outcome was written once and thrown away: the run, whose
// agent and checks had passed, sat Running until the controller's deadline
// ended it as a Timeout. Each write is now tried again until it is taken,
// and the run ends as its attempt did, with its evidence.
func TestOutcomeOutlivesFailedWrites(t *testing.T) {
	const node, name = "node-writes-fail", "outlives-500s"
	var statusFails, evidenceFails atomic.Int32
	statusFails.Store(3)
	evidenceFails.Store(2)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			var left *atomic.Int32
			switch {
			case req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/harnessruns/"+name+"/status"):
				left = &statusFails
			case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/configmaps"):
				left = &evidenceFails
			}
			if left == nil || left.Add(-1) < 0 {
				return rt.RoundTrip(req)
			}
			return &http.Response{
				StatusCode: http.StatusInternalServerError, Request: req,
				Header: http.Header{"Content-Type": []string{"application/json"}},
				Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure",` +
					`"message":"Internal error occurred: failed calling webhook \"down.example\"","reason":"InternalError","code":500}`)),
			}, nil
		})
	}
	startAgentOn(t, cfg, node, &scripted{})
	boundRun(t, name, node, harnessv1.RunScheduled)
	var run *harnessv1.HarnessRun
	waitFor(t, "the run to end", func() bool {
		run = getRun(t, name)
		return run.Status.Phase.Terminal()
	})
	if run.Status.Phase != harnessv1.RunSucceeded || run.Status.Verdict != harnessv1.VerdictPass {
		t.Fatalf("%s %q %s: %s, want the attempt's own Succeeded/Pass", run.Status.Phase, run.Status.Verdict, run.Status.Reason, run.Status.Message)
	}
	if statusFails.Load() >= 0 || evidenceFails.Load() >= 0 {
		t.Fatalf("the injected failures were not all met (status %d, evidence %d left): the test shows nothing", statusFails.Load(), evidenceFails.Load())
	}
	if run.Status.Evidence == nil || run.Status.Evidence.ConfigMapName == "" {
		t.Fatalf("no evidence ConfigMap in status: %+v (%s)", run.Status.Evidence, run.Status.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: run.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Errorf("evidence ConfigMap %q: %v", run.Status.Evidence.ConfigMapName, err)
	}
}
