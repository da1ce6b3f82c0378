package executor

import (
	"bytes"
	"context"
	"fmt"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
)

// maxEnvString is Linux's MAX_ARG_STRLEN (32 pages of 4 KiB): the longest
// string of a program's environment, "NAME=value" with its NUL.
const maxEnvString = 32 * 4096

// readCredentials reads the Secret keys the run selects; an empty one, or
// one for an environment variable that holds a NUL or is longer than an
// environment string may be, is refused.
func (a *attempt) readCredentials(ctx context.Context) error {
	for _, c := range a.run.Spec.Agent.Credentials {
		v, err := a.e.opts.Sources.SecretKey(ctx, a.run, c.SecretKeyRef)
		if err != nil {
			return fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("credential %s/%s: %w", c.SecretKeyRef.Name, c.SecretKeyRef.Key, err))
		}
		if len(v) == 0 {
			return fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("credential %s/%s is empty", c.SecretKeyRef.Name, c.SecretKeyRef.Key))
		}
		// An environment variable ends at a NUL (and in bwrap's options,
		// which travel NUL-separated, the rest would be an option of its
		// own): a value that holds one is refused, not cut.
		if c.Env != "" && bytes.IndexByte(v, 0) >= 0 {
			return fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("credential %s/%s holds a NUL byte, which the environment variable %s cannot carry (store a binary value encoded, base64 for example)",
				c.SecretKeyRef.Name, c.SecretKeyRef.Key, c.Env))
		}
		// Linux bounds each string of a program's environment
		// ("NAME=value" and its NUL) to MAX_ARG_STRLEN: a longer one made
		// bwrap's execve fail with E2BIG, which the run blamed on the agent
		// ("the agent exited with code 1").
		if c.Env != "" && len(c.Env)+len(v)+2 > maxEnvString {
			return fail(harnessv1.ReasonCredentialsUnavailable, fmt.Errorf("credential %s/%s is %d bytes, more than the environment variable %s can carry (%d bytes; Linux's bound on one environment string is %d with its name, '=' and NUL): store it smaller, or deliver it as a file",
				c.SecretKeyRef.Name, c.SecretKeyRef.Key, len(v), c.Env, maxEnvString-len(c.Env)-2, maxEnvString))
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
