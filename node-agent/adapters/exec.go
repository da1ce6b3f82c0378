package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Exec runs spec.agent.command as it is. The command learns its task and
// the MCP server from the environment:
//
//	HARNESSFACTS_PROMPT       the prompt
//	HARNESSFACTS_MCP_URL      the MCP endpoint (transport HTTP)
//	HARNESSFACTS_MCP_COMMAND  a JSON array, the argv serving MCP on stdio (transport Stdio)
//	HARNESSFACTS_MAX_DECISIONS the turn budget
//
// and its credentials as the environment variables the run selected. The
// command is the run's own, so it has no provider hosts of its own: with
// egress ProviderOnly it reaches the host of spec.agent.providerURL and
// spec.network.allowHosts, through HTTPS_PROXY and HTTP_PROXY.
type Exec struct{}

// Name is exec.
func (Exec) Name() harnessv1.Adapter { return harnessv1.AdapterExec }

// Version is the harness's own: the command is the run's, not the node's.
func (Exec) Version(context.Context) (string, error) { return "builtin", nil }

// Prepare passes the command through.
func (Exec) Prepare(in Input) (*Invocation, error) {
	if len(in.Agent.Command) == 0 {
		return nil, errors.New("the exec adapter needs spec.agent.command")
	}
	for _, c := range in.Credentials {
		if c.File != "" {
			return nil, fmt.Errorf("the exec adapter cannot place credential file %s; deliver it as env", c.File)
		}
	}
	inv := &Invocation{
		Argv: append(append([]string{}, in.Agent.Command...), in.Agent.ExtraArgs...),
		Env: []string{
			"HARNESSFACTS_PROMPT=" + in.Prompt,
			fmt.Sprintf("HARNESSFACTS_MAX_DECISIONS=%d", in.MaxDecisions),
		},
	}
	switch in.MCP.Transport {
	case harnessv1.MCPTransportHTTP:
		inv.Env = append(inv.Env, "HARNESSFACTS_MCP_URL="+in.MCP.URL)
	case harnessv1.MCPTransportStdio:
		cmd, err := json.Marshal(in.MCP.Command)
		if err != nil {
			return nil, err
		}
		inv.Env = append(inv.Env, "HARNESSFACTS_MCP_COMMAND="+string(cmd))
		// The command's environment: the agent's, which it inherits.
		for _, k := range slices.Sorted(maps.Keys(in.MCP.Env)) {
			inv.Env = append(inv.Env, k+"="+in.MCP.Env[k])
		}
	}
	if in.Agent.ProviderURL != "" {
		inv.Env = append(inv.Env, "HARNESSFACTS_PROVIDER_URL="+in.Agent.ProviderURL)
	}
	inv.Env = append(inv.Env, credentialEnv(in.Credentials)...)
	return inv, nil
}
