package adapters

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestExtraArgsCannotSetWhatTheAdapterSets: extraArgs come after the
// adapter's flags and a CLI takes a flag's last value, so `--max-turns 50`
// in extraArgs lifted limits.maxDecisions (and a HarnessPolicy ceiling on
// it) while the receipt recorded the limit (net helper of 7 December: five
// model requests under maxDecisions 2). Each CLI adapter refuses the flags
// it sets, in every spelling, and keeps the others.
func TestExtraArgsCannotSetWhatTheAdapterSets(t *testing.T) {
	home := t.TempDir()
	dir, _ := agyCLI(t, "agy")
	for _, name := range []string{"claude", "codex", "gemini", "opencode", "aider"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho 1.0.0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{CLIDir: dir}
	adapters := map[harnessv1.Adapter]Adapter{
		harnessv1.AdapterClaudeCode:  ClaudeCode{cfg: cfg},
		harnessv1.AdapterCodex:       Codex{cfg: cfg},
		harnessv1.AdapterGemini:      Gemini{cfg: cfg},
		harnessv1.AdapterOpenCode:    OpenCode{cfg: cfg},
		harnessv1.AdapterAider:       Aider{cfg: cfg},
		harnessv1.AdapterAntigravity: Antigravity{cfg: cfg},
	}
	refused := map[harnessv1.Adapter][][]string{
		harnessv1.AdapterClaudeCode: {{"--max-turns", "50"}, {"--max-turns=50"}, {"--model", "x"}, {"--mcp-config", "/x.json"},
			{"--permission-mode", "bypassPermissions"}, {"--dangerously-skip-permissions"}, {"--output-format=text"}},
		harnessv1.AdapterCodex:       {{"-m", "x"}, {"-mx"}, {"--model=x"}, {"-s", "read-only"}, {"--cd", "/"}},
		harnessv1.AdapterGemini:      {{"--model", "x"}, {"-o", "text"}, {"--approval-mode=default"}},
		harnessv1.AdapterOpenCode:    {{"--format", "default"}, {"-m", "a/b"}, {"--agent", "plan"}},
		harnessv1.AdapterAider:       {{"--model", "x"}, {"--message", "hi"}, {"--openai-api-base=http://x"}},
		harnessv1.AdapterAntigravity: {{"--model", "x"}, {"-p", "other prompt"}},
	}
	kept := map[harnessv1.Adapter][]string{
		harnessv1.AdapterClaudeCode:  {"--add-dir", "/data"},
		harnessv1.AdapterCodex:       {"-c", `web_search="live"`},
		harnessv1.AdapterGemini:      {"--debug"},
		harnessv1.AdapterOpenCode:    {"--print-logs"},
		harnessv1.AdapterAider:       {"README.md"},
		harnessv1.AdapterAntigravity: {"--add-dir", "."},
	}
	for name, a := range adapters {
		in := func(extra []string) Input {
			return Input{Prompt: "p", Home: home, Workspace: home, MaxDecisions: 2,
				Agent: harnessv1.AgentSpec{Adapter: name, ExtraArgs: extra, ProviderURL: "http://127.0.0.1:8089"}}
		}
		for _, extra := range refused[name] {
			if _, err := a.Prepare(in(extra)); err == nil || !strings.Contains(err.Error(), "which the "+string(name)+" adapter sets itself") {
				t.Errorf("%s, extraArgs %q: %v, want refused", name, extra, err)
			}
		}
		inv, err := a.Prepare(in(kept[name]))
		if err != nil {
			t.Errorf("%s, extraArgs %q: %v", name, kept[name], err)
			continue
		}
		if !strings.Contains(strings.Join(inv.Argv, "\x00"), strings.Join(kept[name], "\x00")) {
			t.Errorf("%s: argv %q lacks the extraArgs %q", name, inv.Argv, kept[name])
		}
	}
}
