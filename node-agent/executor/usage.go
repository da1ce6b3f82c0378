package executor

import (
	"context"
	"fmt"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// usageStatus is status.usage: the model gateway's count where the run
// went through it, else what the CLI's own output says, else source None;
// priced with the operator's table when there is one (before the receipt
// is sealed and signed, so the receipt carries the estimate).
func (a *attempt) usageStatus(ctx context.Context, log []byte) *harnessv1.UsageStatus {
	requested := adapters.RequestedModel(a.run.Spec.Agent.Adapter, a.run.Spec.Agent.Model)
	var (
		st    *harnessv1.UsageStatus
		parts []harnessv1.ModelTokens
	)
	switch r, ok := a.adapter.(adapters.UsageReader); {
	case a.gw != nil:
		t := a.gw.g.Tally()
		st = t.Status(harnessv1.UsageFromGateway, requested)
		for _, m := range t.ByModel() {
			parts = append(parts, modelTokens(m.Model, requested, m.Counts))
		}
	case ok && log != nil:
		if u, found := r.Usage(log); found {
			var t usage.Tally
			t.Add(usage.Reply{Counts: u.Counts, Found: true})
			for _, m := range u.Models {
				t.Add(usage.Reply{Model: m, Found: true}) // a name, not an answer
			}
			// Requests are counted by the gateway only.
			st = t.Status(harnessv1.UsageFromAgentOutput, requested)
			if len(u.Models) <= 1 {
				model := ""
				if len(u.Models) == 1 {
					model = u.Models[0]
				}
				parts = []harnessv1.ModelTokens{modelTokens(model, requested, u.Counts)}
			} else {
				a.usageNote = fmt.Sprintf("no estimated cost: the CLI's output names %d models but not the tokens of each", len(u.Models))
			}
		}
	}
	if st == nil {
		return &harnessv1.UsageStatus{Source: harnessv1.UsageNone, ModelRequested: requested}
	}
	// The names are the CLI's output decoded (a credential escaped in its
	// JSON passed the output's redaction) or the provider's words: they
	// are redacted again, as the trajectory is, before status and receipt.
	// A name the tally cut to its bound may end in what the cut left of a
	// credential, which the redactor no longer matches: that is cut too.
	if a.redactor != nil {
		redactName := func(m string) string {
			if usage.MayBeCut(m) {
				return a.redactor.CutShort(m)
			}
			return a.redactor.String(m)
		}
		for i, m := range st.Models {
			st.Models[i] = redactName(m)
		}
		for i := range parts {
			parts[i].Model = redactName(parts[i].Model)
		}
	}
	// And made inert, as the output tail is: a provider that names the
	// model it was asked for (vLLM, Ollama, LiteLLM, fake-provider) lets
	// the agent choose these words through the gateway, and the CLI's own
	// output is the agent's. Raw, a C1 control (the 8-bit CSI U+009B), a
	// bidi override or U+FFFE went to the terminal of whoever read the
	// run, and made `harnessfacts run` print no status and `kubectl get
	// -o yaml` fail (no YAML parser takes them). Cut again to the
	// schema's 256 characters, which the inert form may pass.
	for i, m := range st.Models {
		st.Models[i] = truncate(termsafe.String(m), 256)
	}
	if parts != nil && a.e.opts.Pricing != nil {
		table, policy, err := a.e.opts.Pricing(ctx, a.run)
		switch {
		case err != nil:
			a.usageNote = "no estimated cost: " + err.Error()
		case table != nil:
			if st.EstimatedCost, err = table.Cost(parts); err != nil {
				a.usageNote = fmt.Sprintf("no estimated cost: %v (HarnessPolicy %s pricing)", err, policy)
			}
		}
	}
	return st
}

// modelTokens are counts served by model (the model asked for when the
// reply named none).
func modelTokens(model, requested string, counts usage.Counts) harnessv1.ModelTokens {
	if model == "" {
		model = requested
	}
	var c usage.Counts
	c.Add(counts) // bounded as status.usage is

	return harnessv1.ModelTokens{Model: model, Input: c.Input, Output: c.Output, CacheRead: c.CacheRead, CacheWrite: c.CacheWrite}
}
