package adapters

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Aider runs Aider (PyPI aider-chat), one message, no git:
//
//	aider --message PROMPT --no-pretty --no-fancy-input --yes-always --no-git
//	      --no-check-update --no-analytics --no-show-model-warnings
//	      --no-show-release-notes --no-detect-urls
//	      --input-history-file H --chat-history-file H
//	      [--model M] [--openai-api-base PROVIDERURL/v1 --model-metadata-file F]
//	      [-- FILE...]
//
// Aider has no tools: the model's text carries the edits, in the edit format
// Aider picks for the model ("whole" for a model it does not know, as every
// model behind a provider URL is). It edits only files in its chat; the
// adapter adds the workspace files the prompt names (positional FILE
// arguments, so their content reaches the model), and --yes-always lets it
// create or take in any other file the model edits. `--yes-always` still
// declines running shell commands.
//
// Aider has no MCP support: a run that asks for MCP is run without it, with
// Invocation.MCPUnsupported set, so its status says so and its verdict is
// never Pass. It has no turn limit either (one --message is one exchange,
// plus at most three reflections on malformed edits).
//
// Credentials: OPENAI_API_KEY or ANTHROPIC_API_KEY as env. With a provider
// URL the model is openai/NAME at PROVIDERURL/v1 (Chat Completions), whose
// key is OPENAI_API_KEY: when the run delivers only ANTHROPIC_API_KEY, that
// value is also given as OPENAI_API_KEY (env, never argv).
//
// Offline: LITELLM_LOCAL_MODEL_COST_MAP keeps litellm's price map local;
// Aider's own copy of it (fetched from GitHub into ~/.aider/caches when its
// cache is missing or empty) is answered by a model-metadata file naming the
// model and by a seeded cache file in the run's home.
type Aider struct{ cfg Config }

// NewAider returns the Aider adapter.
func NewAider(cfg Config) Aider { return Aider{cfg: cfg} }

// Name is the adapter's name.
func (Aider) Name() harnessv1.Adapter { return harnessv1.AdapterAider }

// Version runs `aider --version` ("aider 0.86.2").
func (a Aider) Version(ctx context.Context) (string, error) {
	cmd, err := a.cfg.command("aider")
	if err != nil {
		return "", err
	}
	return cliVersion(ctx, cmd, "--version")
}

// Aider's files below the run's home.
const (
	aiderMetadataFile = "aider-model-metadata.json"
	aiderCacheFile    = ".aider/caches/model_prices_and_context_window.json"
	// aiderPromptFile holds the prompt, read with --message-file.
	aiderPromptFile = ".harnessfacts/prompt.txt"
	// aiderDefaultModel names the model at a provider URL when
	// spec.agent.model is empty.
	aiderDefaultModel = "default"
	// aiderMaxFiles bounds the files added to the chat from the prompt.
	aiderMaxFiles = 32
)

// AiderNoMCP is the note of a run that asked for MCP.
const AiderNoMCP = "Aider has no MCP support"

// Prepare builds the command line.
func (a Aider) Prepare(in Input) (*Invocation, error) {
	if err := refuseOwnedFlags(harnessv1.AdapterAider, in.Agent.ExtraArgs, "--message-file", "--message", "-m", "--model", "--openai-api-base",
		"--model-metadata-file", "--input-history-file", "--chat-history-file"); err != nil {
		return nil, err
	}
	cmd, err := a.cfg.command("aider")
	if err != nil {
		return nil, err
	}
	inv := &Invocation{Files: map[string][]byte{}}
	inv.ReadOnly, inv.PathDirs = a.cfg.mounts(cmd)
	// The venv's interpreter, for an install the operator named (a PATH
	// lookup binds nothing, see mounts).
	if prefix := aiderPythonPrefix(cmd); a.cfg.CLIDir != "" && prefix != "" && !slices.Contains(inv.ReadOnly, prefix) {
		inv.ReadOnly = append(inv.ReadOnly, prefix)
	}

	envs := map[string]string{}
	for _, c := range in.Credentials {
		if c.File != "" {
			return nil, fmt.Errorf("the aider adapter cannot place credential file %s; deliver OPENAI_API_KEY or ANTHROPIC_API_KEY as env", c.File)
		}
		if c.Env != "" {
			envs[c.Env] = string(c.Value)
		}
	}
	if len(envs) == 0 && in.Agent.ProviderURL == "" {
		// With no key Aider offers an OpenRouter login (a browser and a
		// callback it would wait for until the deadline).
		return nil, errors.New("the aider adapter needs OPENAI_API_KEY or ANTHROPIC_API_KEY (as env), or spec.agent.providerURL")
	}
	if in.MCP.Transport == harnessv1.MCPTransportHTTP || in.MCP.Transport == harnessv1.MCPTransportStdio {
		inv.MCPUnsupported = true
		inv.Notes = append(inv.Notes, fmt.Sprintf("%s: the run asked for MCP over %s, and Aider ran without the MCP server, so it could not call %s", AiderNoMCP, in.MCP.Transport, in.MCP.Tool))
	}

	// --message-file: the prompt in a file of the run's home, off argv,
	// where every host user could read it.
	inv.Files[aiderPromptFile] = []byte(in.Prompt)
	inv.Argv = []string{cmd, "--message-file", filepath.Join(in.Home, aiderPromptFile),
		"--no-pretty", "--no-fancy-input", "--yes-always", "--no-git",
		"--no-check-update", "--no-analytics", "--no-show-model-warnings", "--no-show-release-notes",
		// A URL in the prompt would otherwise be fetched (--yes-always
		// accepts the offer).
		"--no-detect-urls",
		// Aider keeps its histories in the working directory: keep them
		// out of the workspace, whose files are the run's artifacts.
		"--input-history-file", filepath.Join(in.Home, ".aider.input.history"),
		"--chat-history-file", filepath.Join(in.Home, ".aider.chat.history.md"),
	}
	inv.Env = append(credentialEnv(in.Credentials), "LITELLM_LOCAL_MODEL_COST_MAP=True", "NO_COLOR=1")

	// Aider's model-info cache: any non-empty map stops the GitHub fetch.
	inv.Files[aiderCacheFile] = []byte(`{"harnessfacts-offline": {}}` + "\n")
	if in.Agent.ProviderURL != "" {
		name := strings.TrimPrefix(in.Agent.Model, "openai/")
		if name == "" {
			name = aiderDefaultModel
		}
		model := "openai/" + name
		meta, err := json.MarshalIndent(map[string]any{model: map[string]any{
			"max_tokens": 8192, "max_input_tokens": 128000, "max_output_tokens": 8192,
			"input_cost_per_token": 0, "output_cost_per_token": 0,
			"litellm_provider": "openai", "mode": "chat",
		}}, "", "  ")
		if err != nil {
			return nil, err
		}
		inv.Files[aiderMetadataFile] = meta
		inv.Argv = append(inv.Argv, "--model", model,
			"--openai-api-base", strings.TrimSuffix(in.Agent.ProviderURL, "/")+"/v1",
			"--model-metadata-file", filepath.Join(in.Home, aiderMetadataFile))
		if _, ok := envs["OPENAI_API_KEY"]; !ok {
			if v, ok := envs["ANTHROPIC_API_KEY"]; ok {
				inv.Env = append(inv.Env, "OPENAI_API_KEY="+v)
			} else if len(envs) == 0 {
				// litellm's OpenAI client refuses to start without a key; a
				// provider URL may need none.
				inv.Env = append(inv.Env, "OPENAI_API_KEY=harnessfacts-no-key")
			}
		}
	} else {
		if in.Agent.Model != "" {
			inv.Argv = append(inv.Argv, "--model", in.Agent.Model)
		}
		inv.ProviderHosts = aiderHosts(in.Agent.Model, envs)
	}
	inv.Argv = append(inv.Argv, in.Agent.ExtraArgs...)
	if files := aiderFiles(in.Workspace, in.Prompt); len(files) > 0 {
		inv.Argv = append(append(inv.Argv, "--"), files...)
	}
	return inv, nil
}

// aiderHosts are the provider hosts for model and the keys the run
// delivers.
func aiderHosts(model string, envs map[string]string) []string {
	switch {
	case strings.HasPrefix(model, "anthropic/") || strings.Contains(model, "claude") || model == "sonnet" || model == "opus" || model == "haiku":
		return []string{"api.anthropic.com"}
	case strings.HasPrefix(model, "openai/") || strings.HasPrefix(model, "gpt-") || strings.HasPrefix(model, "o1") || strings.HasPrefix(model, "o3") || strings.HasPrefix(model, "o4"):
		return []string{"api.openai.com"}
	}
	var hosts []string
	if _, ok := envs["ANTHROPIC_API_KEY"]; ok {
		hosts = append(hosts, "api.anthropic.com")
	}
	if _, ok := envs["OPENAI_API_KEY"]; ok {
		hosts = append(hosts, "api.openai.com")
	}
	if len(hosts) == 0 {
		hosts = []string{"api.anthropic.com", "api.openai.com"}
	}
	return hosts
}

// aiderPythonPrefix is the install prefix of the interpreter of Aider's
// virtualenv (pyvenv.cfg's "home" is its bin folder) when it lies where the
// sandbox may hide it (a pyenv under /root, say); empty when it is the
// system's (/usr) or unknown.
func aiderPythonPrefix(cmd string) string {
	resolved, err := filepath.EvalSymlinks(cmd)
	if err != nil {
		return ""
	}
	f, err := os.Open(filepath.Join(filepath.Dir(filepath.Dir(resolved)), "pyvenv.cfg"))
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok || strings.TrimSpace(k) != "home" {
			continue
		}
		bin := strings.TrimSpace(v)
		if r, err := filepath.EvalSymlinks(bin); err == nil {
			bin = r
		}
		prefix := filepath.Dir(bin)
		if prefix == "/" || prefix == "/usr" || !filepath.IsAbs(prefix) {
			return ""
		}
		return prefix
	}
	return ""
}

// aiderFiles are the workspace's files whose paths the prompt names, in
// workspace order: Aider shows the model only the files in its chat.
func aiderFiles(workspace, prompt string) []string {
	if workspace == "" || prompt == "" {
		return nil
	}
	var files []string
	seen := 0
	errStop := errors.New("stop")
	_ = filepath.WalkDir(workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if seen++; seen > 10000 || len(files) >= aiderMaxFiles {
			return errStop
		}
		if d.IsDir() {
			if p != workspace && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(workspace, p)
		if err != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if aiderNames(prompt, rel) {
			files = append(files, rel)
		}
		return nil
	})
	return files
}

// aiderNames reports whether prompt names path as a word of its own.
func aiderNames(prompt, path string) bool {
	// A sentence's full stop may follow the path; "notes.md.bak" does not
	// name notes.md.
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_./-])` + regexp.QuoteMeta(path) + `($|[^A-Za-z0-9_./-]|\.($|[^A-Za-z0-9_-]))`)
	return re.MatchString(prompt)
}
