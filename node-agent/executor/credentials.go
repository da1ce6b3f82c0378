package executor

import (
	"context"
	"fmt"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// readCredentials reads the Secret keys the run selects; an empty one is
// refused.
func (a *attempt) readCredentials(ctx context.Context) error {
	for _, c := range a.run.Spec.Agent.Credentials {
		v, err := a.e.opts.Sources.SecretKey(ctx, a.run, c.SecretKeyRef)
		if err != nil {
			return fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("credential %s/%s: %w", c.SecretKeyRef.Name, c.SecretKeyRef.Key, err))
		}
		if len(v) == 0 {
			return fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("credential %s/%s is empty", c.SecretKeyRef.Name, c.SecretKeyRef.Key))
		}
		a.creds = append(a.creds, adapters.Credential{Env: c.Env, File: c.File, Value: v})
	}
	return nil
}

// buildRedactor builds the one redactor for everything the run stores or
// shows: the credential values in all their forms and gitleaks' token
// rules, never the MCP token, whose presence is the proof.
func (a *attempt) buildRedactor(context.Context) error {
	var secrets []string
	for _, c := range a.creds {
		secrets = append(secrets, string(c.Value))
	}
	r, err := redact.New(redact.Options{Secrets: secrets, Keep: []string{a.mcp.token}})
	if err != nil {
		return fail(harnessv1.ReasonRedactionFailed, fmt.Errorf("the redactor could not be built: %w", err))
	}
	a.redactor = r
	return nil
}
