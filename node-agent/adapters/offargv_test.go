package adapters

import (
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Neither the prompt nor the run's MCP socket may be on an agent's command
// line (/proc/PID/cmdline is readable by every host user): each adapter
// hands the prompt over on stdin or in a file, and the stdio server's socket
// in the server's environment settings. Antigravity alone has only -p
// PROMPT, and its note says so.
func TestPromptAndSocketOffTheCommandLine(t *testing.T) {
	const prompt = "the-prompt-7f3a9 do the task"
	const socket = "/runs/harnessfacts-r1-1-abcd/sockets/mcp-stdio.sock"
	codexDir, _ := codexCLI(t)
	openCodeCfg, _ := openCodeStubCLI(t, "opencode", "1.18.33")
	agyDir, _ := agyCLI(t, "agy")
	aiderDir := claudeStandIn(t, "aider", "exit 0")
	for _, a := range []Adapter{
		NewClaudeCode(Config{CLIDir: claudeStandIn(t, "claude", "exit 0")}),
		NewCodex(Config{CLIDir: codexDir}),
		NewGemini(Config{CLIDir: fakeGemini(t)}),
		NewOpenCode(openCodeCfg),
		NewAider(Config{CLIDir: aiderDir}),
		NewAntigravity(Config{CLIDir: agyDir}),
		Exec{},
	} {
		t.Run(string(a.Name()), func(t *testing.T) {
			in := Input{
				Agent:  harnessv1.AgentSpec{Adapter: a.Name(), ProviderURL: "http://127.0.0.1:8089", Command: []string{"sh", "agent.sh"}},
				Prompt: prompt, Workspace: t.TempDir(), Home: "/runs/harnessfacts-r1-1-abcd/home", MaxDecisions: 10,
				MCP: MCPEndpoint{Transport: harnessv1.MCPTransportStdio, Command: []string{"/hf", "mcp-stdio"},
					Env: map[string]string{"HARNESSFACTS_MCP_SOCKET": socket}, Server: "harnessfacts", Tool: "get_token"},
			}
			inv, err := a.Prepare(in)
			if err != nil {
				t.Fatal(err)
			}
			argv := strings.Join(inv.Argv, "\x00")
			if strings.Contains(argv, socket) {
				t.Errorf("the MCP socket is on the command line: %q", inv.Argv)
			}
			var elsewhere string
			for _, f := range inv.Files {
				elsewhere += string(f)
			}
			elsewhere += strings.Join(inv.Env, "\n")
			if !inv.MCPUnsupported && !strings.Contains(elsewhere, socket) {
				t.Errorf("the MCP socket reaches the stdio server nowhere (files and env)")
			}
			onArgv := strings.Contains(argv, "the-prompt-7f3a9")
			switch a.Name() {
			case harnessv1.AdapterAntigravity:
				if !onArgv || !strings.Contains(strings.Join(inv.Notes, " "), "prompt is on agy's command line") {
					t.Errorf("antigravity: prompt on argv %v, notes %q: the note must say where the prompt is", onArgv, inv.Notes)
				}
			default:
				if onArgv {
					t.Errorf("the prompt is on the command line: %q", inv.Argv)
				}
				if !strings.Contains(string(inv.Stdin)+elsewhere, prompt) {
					t.Errorf("the prompt reaches the CLI neither on stdin nor in a file nor in the environment")
				}
			}
		})
	}
}
