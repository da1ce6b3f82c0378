package executor

import (
	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// usageStatus is status.usage: the model gateway's count where the run
// went through it, else what the CLI's own output says, else source None.
func (a *attempt) usageStatus(log []byte) *harnessv1.UsageStatus {
	requested := adapters.RequestedModel(a.run.Spec.Agent.Adapter, a.run.Spec.Agent.Model)
	if a.gw != nil {
		return a.gw.g.Tally().Status(harnessv1.UsageFromGateway, requested)
	}
	if r, ok := a.adapter.(adapters.UsageReader); ok && log != nil {
		if u, found := r.Usage(log); found {
			var t usage.Tally
			t.Add(usage.Reply{Counts: u.Counts, Found: true})
			for _, m := range u.Models {
				t.Add(usage.Reply{Model: m})
			}
			// Requests are counted by the gateway only.
			return t.Status(harnessv1.UsageFromAgentOutput, requested)
		}
	}
	return &harnessv1.UsageStatus{Source: harnessv1.UsageNone, ModelRequested: requested}
}
