// Package fakeprovider is a scripted model provider: it speaks the wire
// protocols the agent CLIs use (Anthropic Messages, OpenAI Responses, OpenAI
// Chat Completions, Gemini generateContent) and answers every request from a
// fixture's script, so a real CLI can be driven end to end with no network
// and no credentials.
//
// A script is a list of abstract steps: write a file, run a shell command,
// call an MCP tool, answer with text. Each dialect turns the next step into
// the calling CLI's own tool call (Claude Code's Write, Codex's
// exec_command, Gemini's write_file, ...), choosing among the tools the
// request offers. Which step is next is read from the request itself (how
// many tool results its conversation holds), never from arrival order, so
// side requests such as title generation cannot shift the script.
package fakeprovider

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// ScriptName is the script's file name in a fixture folder.
const ScriptName = "provider-script.yaml"

// Script is a fixture's provider-script.yaml. Unknown fields are an error.
//
//	steps:
//	- write: {path: greeting.txt, content: "hello, harness\n"}
//	- mcp: {server: harnessfacts, tool: get_token}
//	- write: {path: token.txt, content: "{{result}}\n"}
//	- answer: Done.
type Script struct {
	// Steps are done in order, one per model turn.
	Steps []Step `json:"steps"`
	// Prompt is the fixture's prompt (from its fixture.yaml, not from the
	// script), by which a provider serving many fixtures at one URL knows
	// a request's fixture.
	Prompt string `json:"-"`
}

// Step is exactly one of Write, Shell, MCP and Answer. In Write.Content,
// Shell.Command and Answer, "{{result}}" stands for the text of the last
// tool result the CLI sent back (for get_token: the token).
type Step struct {
	Write  *WriteStep `json:"write,omitempty"`
	Shell  *ShellStep `json:"shell,omitempty"`
	MCP    *MCPStep   `json:"mcp,omitempty"`
	Answer string     `json:"answer,omitempty"`
}

// WriteStep writes Content into Path, relative to the agent's workspace.
type WriteStep struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// ShellStep runs Command with the CLI's shell tool, in the workspace.
type ShellStep struct {
	Command string `json:"command"`
}

// MCPStep calls Tool of the MCP server Server with Arguments.
type MCPStep struct {
	Server    string         `json:"server"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

// ResultPlaceholder is replaced by the last tool result's text.
const ResultPlaceholder = "{{result}}"

// LoadScript reads and checks a script file.
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseScript(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

var relPath = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// ParseScript parses and checks a script.
func ParseScript(b []byte) (*Script, error) {
	var s Script
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, err
	}
	if len(s.Steps) == 0 {
		return nil, errors.New("the script has no steps")
	}
	for i, st := range s.Steps {
		n := 0
		if st.Write != nil {
			n++
			if !relPath.MatchString(st.Write.Path) || strings.Contains("/"+st.Write.Path+"/", "/../") || strings.Contains("/"+st.Write.Path+"/", "/./") {
				return nil, fmt.Errorf("steps[%d].write.path %q must be a relative path inside the workspace", i, st.Write.Path)
			}
		}
		if st.Shell != nil {
			n++
			if strings.TrimSpace(st.Shell.Command) == "" {
				return nil, fmt.Errorf("steps[%d].shell.command is empty", i)
			}
		}
		if st.MCP != nil {
			n++
			if st.MCP.Server == "" || st.MCP.Tool == "" {
				return nil, fmt.Errorf("steps[%d].mcp needs server and tool", i)
			}
		}
		if st.Answer != "" {
			n++
			if i != len(s.Steps)-1 {
				return nil, fmt.Errorf("steps[%d]: an answer ends the script, so it must be the last step", i)
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("steps[%d] must have exactly one of write, shell, mcp and answer", i)
		}
	}
	return &s, nil
}

// Turn is one request as every dialect reduces it: what the model is
// offered and what it has done so far in this task.
type Turn struct {
	// Tools are the names of the tools the request offers, as the CLI
	// spells them. A request with none (title generation, summaries) gets
	// plain text.
	Tools []string
	// Results are the texts of the tool results since the task's prompt,
	// oldest first, each unwrapped to what the tool returned.
	Results []string
}

// ActionKind says what the model does in a reply.
type ActionKind string

// The kinds of action.
const (
	ActWrite  ActionKind = "write"
	ActShell  ActionKind = "shell"
	ActMCP    ActionKind = "mcp"
	ActAnswer ActionKind = "answer"
)

// Action is the step to take now, with "{{result}}" filled in.
type Action struct {
	Kind ActionKind
	// Step is the index of the step in the script; len(Steps) for an
	// answer given out of turn (a request with no tools, a script run out).
	Step int
	// Path and Content of a write.
	Path, Content string
	// Command of a shell step.
	Command string
	// Tool is the offered tool name an MCP step resolved to; Arguments its
	// arguments (never nil).
	Tool      string
	Arguments map[string]any
	// Text of an answer.
	Text string
}

// DefaultAnswer closes a script that does not end with an answer.
const DefaultAnswer = "Done."

// Next is the action for t: the step after those whose results t holds.
// A request that offers no tools gets the answer (or DefaultAnswer), as
// does a request whose MCP tool is not offered (the error says so, for
// the provider's log).
func (s *Script) Next(t Turn) (Action, error) {
	last := ""
	if len(t.Results) > 0 {
		last = t.Results[len(t.Results)-1]
	}
	fill := func(v string) string { return strings.ReplaceAll(v, ResultPlaceholder, strings.TrimSpace(last)) }
	i := len(t.Results)
	answer := func(err error) (Action, error) {
		text := DefaultAnswer
		if n := len(s.Steps); s.Steps[n-1].Answer != "" {
			text = s.Steps[n-1].Answer
		}
		return Action{Kind: ActAnswer, Step: len(s.Steps), Text: fill(text)}, err
	}
	if len(t.Tools) == 0 || i >= len(s.Steps) {
		return answer(nil)
	}
	st := s.Steps[i]
	switch {
	case st.Write != nil:
		return Action{Kind: ActWrite, Step: i, Path: st.Write.Path, Content: fill(st.Write.Content)}, nil
	case st.Shell != nil:
		return Action{Kind: ActShell, Step: i, Command: fill(st.Shell.Command)}, nil
	case st.MCP != nil:
		name, ok := MCPToolName(t.Tools, st.MCP.Server, st.MCP.Tool)
		if !ok {
			return answer(fmt.Errorf("step %d: no offered tool is %s of server %s (offered: %s)", i, st.MCP.Tool, st.MCP.Server, strings.Join(t.Tools, ", ")))
		}
		args := st.MCP.Arguments
		if args == nil {
			args = map[string]any{}
		}
		return Action{Kind: ActMCP, Step: i, Tool: name, Arguments: args}, nil
	default:
		return Action{Kind: ActAnswer, Step: i, Text: fill(st.Answer)}, nil
	}
}

// MCPToolName finds the offered name of tool of server: each CLI spells
// it its own way (mcp__S__T, mcp_S_T, S_T, or T inside a namespace).
func MCPToolName(offered []string, server, tool string) (string, bool) {
	for _, want := range []string{
		"mcp__" + server + "__" + tool, // Claude Code; Codex's namespace+function
		"mcp_" + server + "_" + tool,   // Gemini CLI
		server + "_" + tool,            // OpenCode
		server + "__" + tool,
	} {
		for _, o := range offered {
			if o == want {
				return o, true
			}
		}
	}
	for _, o := range offered {
		if o == tool {
			return o, true
		}
	}
	return "", false
}

// Find returns the first of names that is offered.
func Find(offered []string, names ...string) (string, bool) {
	for _, n := range names {
		for _, o := range offered {
			if o == n {
				return o, true
			}
		}
	}
	return "", false
}

// ShellWrite is a POSIX shell command that writes content into path, for
// CLIs that edit files only through their shell tool.
func ShellWrite(path, content string) string {
	return "printf '%s' " + shellQuote(content) + " > " + shellQuote(path)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// LoadFixtureScripts reads DIR/NAME/provider-script.yaml of every fixture
// folder NAME of dir that has one, with the prompt of DIR/NAME/fixture.yaml.
func LoadFixtureScripts(dir string) (map[string]*Script, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]*Script{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name(), ScriptName)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		s, err := LoadScript(p)
		if err != nil {
			return nil, err
		}
		// The prompt, for requests to the provider's root; a folder
		// without a readable one is still served under /s/NAME.
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "fixture.yaml")); err == nil {
			var m struct {
				Prompt string `json:"prompt"`
			}
			if yaml.Unmarshal(b, &m) == nil {
				s.Prompt = strings.TrimSpace(m.Prompt)
			}
		}
		out[e.Name()] = s
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no fixture folder of %s has a %s", dir, ScriptName)
	}
	return out, nil
}
