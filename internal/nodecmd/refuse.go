package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// refuseWithoutSandbox stops a node-agent that could run agents only
// unsandboxed. The chart's two node modes promise bubblewrap with per-run
// cgroups, and Helm cannot see when it renders whether a node can honour
// the mode (its cgroup version, user-namespace support). So the node-agent
// checks at start: when no sandbox mode passes preflight, it records why as
// its HarnessNode's Ready=False condition (reason SandboxUnavailable),
// where `kubectl get harnessnodes` shows it, and exits with the same
// message, which the pod's status and logs show.
func refuseWithoutSandbox(ctx context.Context, c *kube.Client, nodeName string, slots int32, opts sandbox.Options) error {
	var reasons []string
	var modes []harnessv1.SandboxModeInfo
	for _, av := range sandbox.Preflight(ctx, opts) {
		modes = append(modes, harnessv1.SandboxModeInfo{Mode: string(av.Mode), Available: av.Available, Message: truncate(av.Reason, 1024)})
		if av.Mode == sandbox.ModePlain {
			continue
		}
		if av.Available {
			return nil
		}
		reasons = append(reasons, fmt.Sprintf("%s: %s", av.Mode, av.Reason))
	}
	return refuse(ctx, c, nodeName, slots, modes, fmt.Sprintf("the node-agent refuses to run agents on node %s: no sandbox works here (%s)%s",
		nodeName, strings.Join(reasons, "; "), modeHint()))
}

// refuse records msg as the HarnessNode's Ready=False condition and
// returns it as the error the node-agent exits with.
func refuse(ctx context.Context, c *kube.Client, nodeName string, slots int32, modes []harnessv1.SandboxModeInfo, msg string) error {
	if err := recordRefusal(ctx, c, nodeName, slots, modes, msg); err != nil {
		return fmt.Errorf("%s; recording it on HarnessNode %s failed too: %w", msg, nodeName, err)
	}
	return errors.New(msg)
}

func recordRefusal(ctx context.Context, c *kube.Client, nodeName string, slots int32, modes []harnessv1.SandboxModeInfo, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node := &harnessv1.HarnessNode{}
		err := c.Get(ctx, types.NamespacedName{Name: nodeName}, node)
		if apierrors.IsNotFound(err) {
			node = &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: harnessv1.HarnessNodeSpec{Slots: slots}}
			err = c.Create(ctx, node)
		}
		if err != nil {
			return err
		}
		node.Status.SandboxModes = modes
		node.Status.SlotsInUse = 0
		meta.SetStatusCondition(&node.Status.Conditions, metav1.Condition{Type: harnessv1.ConditionNodeReady, Status: metav1.ConditionFalse,
			Reason: harnessv1.ReasonSandboxUnavailable, Message: truncate(msg, 32768)})
		return c.Status().Update(ctx, node)
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
