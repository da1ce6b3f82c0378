package fakeprovider

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// geminiDialect serves Gemini generateContent (Gemini CLI):
//
//	POST /v1beta/models/MODEL:streamGenerateContent?alt=sse → SSE, one
//	     "data: GenerateContentResponse" event per chunk
//	POST /v1beta/models/MODEL:generateContent → one GenerateContentResponse
//
// The request's contents hold the whole conversation: the model's calls are
// parts {"functionCall":{"name","args"}} and the CLI's results parts
// {"functionResponse":{"name","response":{...}}}. A tool call is answered
// as a functionCall part with finishReason STOP, which is what the Gemini
// API sends; the CLI runs every call of a reply before asking again.
var geminiDialect = dialect{name: "gemini", serve: serveGemini}

// geminiRequest is the part of a GenerateContentRequest the script needs.
type geminiRequest struct {
	Contents []geminiContent `json:"contents"`
	Tools    []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

type geminiPart struct {
	Text             string                  `json:"text,omitempty"`
	FunctionCall     *geminiFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *geminiFunctionResponse `json:"functionResponse,omitempty"`
}

type geminiFunctionCall struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

type geminiFunctionResponse struct {
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

// Gemini CLI's own tool names (0.61.0).
const (
	geminiWriteFile = "write_file"
	geminiShell     = "run_shell_command"
)

func serveGemini(x *exchange) {
	model, method, ok := strings.Cut(strings.TrimPrefix(x.path, "/v1beta/models/"), ":")
	if !ok || model == "" {
		x.fail(http.StatusNotFound, fmt.Errorf("no model in %s", x.path))
		return
	}
	x.rec.Model = model
	var req geminiRequest
	if err := json.Unmarshal(x.body, &req); err != nil {
		x.fail(http.StatusBadRequest, fmt.Errorf("a generateContent request: %w", err))
		return
	}
	t := Turn{}
	for _, tool := range req.Tools {
		for _, f := range tool.FunctionDeclarations {
			t.Tools = append(t.Tools, f.Name)
		}
	}
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			if p.FunctionResponse != nil {
				t.Results = append(t.Results, geminiResultText(p.FunctionResponse.Response))
			}
		}
	}
	part, err := geminiReply(x.next(t), t.Tools)
	if err != nil {
		// The step cannot be taken with the tools offered: end the task
		// with text, and say why in the provider's log.
		x.rec.Action, x.rec.Error = ActAnswer, err.Error()
		part = geminiPart{Text: DefaultAnswer}
	}
	if part.FunctionCall != nil {
		x.rec.Tool = part.FunctionCall.Name
	}
	chunk, err := json.Marshal(geminiResponse(AnsweredModel(model), part, x.usage))
	if err != nil {
		x.fail(http.StatusInternalServerError, err)
		return
	}
	if method == "streamGenerateContent" {
		var s SSE
		s.Event("", chunk)
		x.writeBody("text/event-stream", s.Bytes())
		return
	}
	x.writeBody("application/json", chunk)
}

// geminiReply is a's part in Gemini CLI's tool shapes. A write uses
// write_file, which overwrites an existing file without reading it first
// (the hello fixture's greeting.txt exists); a CLI that does not offer it
// (approval mode default removes edit tools in headless runs) gets the
// write through run_shell_command instead.
func geminiReply(a Action, offered []string) (geminiPart, error) {
	call := func(name string, args map[string]any) (geminiPart, error) {
		return geminiPart{FunctionCall: &geminiFunctionCall{Name: name, Args: args}}, nil
	}
	switch a.Kind {
	case ActWrite:
		if _, ok := Find(offered, geminiWriteFile); ok {
			return call(geminiWriteFile, map[string]any{"file_path": a.Path, "content": a.Content})
		}
		if _, ok := Find(offered, geminiShell); ok {
			return call(geminiShell, map[string]any{"command": ShellWrite(a.Path, a.Content)})
		}
		return geminiPart{}, fmt.Errorf("step %d: neither %s nor %s is offered to write %s", a.Step, geminiWriteFile, geminiShell, a.Path)
	case ActShell:
		if _, ok := Find(offered, geminiShell); ok {
			return call(geminiShell, map[string]any{"command": a.Command})
		}
		return geminiPart{}, fmt.Errorf("step %d: %s is not offered", a.Step, geminiShell)
	case ActMCP:
		return call(a.Tool, a.Arguments)
	case ActAnswer:
		return geminiPart{Text: a.Text}, nil
	}
	return geminiPart{}, errors.New("unknown action " + string(a.Kind))
}

// geminiResponse is one GenerateContentResponse holding part, with u as
// Gemini says it (the prompt count includes the cached tokens).
func geminiResponse(model string, part geminiPart, u Usage) map[string]any {
	return map[string]any{
		"candidates": []any{map[string]any{
			"content":      geminiContent{Role: "model", Parts: []geminiPart{part}},
			"finishReason": "STOP",
			"index":        0,
		}},
		"usageMetadata": map[string]int64{"promptTokenCount": u.Input + u.CacheRead, "candidatesTokenCount": u.Output,
			"cachedContentTokenCount": u.CacheRead, "totalTokenCount": u.Input + u.CacheRead + u.Output},
		"modelVersion": model,
	}
}

// geminiResultText is the text a functionResponse carries. Gemini CLI
// sends {"output": TEXT} (or {"error": TEXT}) and wraps an MCP tool's text
// in <untrusted_context> (and a shell's in <output>); the script wants what
// the tool itself returned.
func geminiResultText(raw json.RawMessage) string {
	var r struct {
		Output  *string `json:"output"`
		Error   *string `json:"error"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return string(raw)
	}
	var text string
	switch {
	case r.Output != nil:
		text = *r.Output
	case r.Error != nil:
		text = *r.Error
	case len(r.Content) > 0:
		var texts []string
		for _, c := range r.Content {
			if c.Type == "" || c.Type == "text" {
				texts = append(texts, c.Text)
			}
		}
		text = strings.Join(texts, "\n")
	default:
		return string(raw)
	}
	return unwrapTags(text, "untrusted_context", "output")
}

// unwrapTags removes the wrapping <tag ...>…</tag> of each tag from text,
// outermost first.
func unwrapTags(text string, tags ...string) string {
	for changed := true; changed; {
		changed = false
		s := strings.TrimSpace(text)
		for _, tag := range tags {
			if !strings.HasPrefix(s, "<"+tag) || !strings.HasSuffix(s, "</"+tag+">") {
				continue
			}
			open := strings.IndexByte(s, '>')
			if open < 0 || open > len(s)-len("</"+tag+">") {
				continue
			}
			if c := s[len("<"+tag)]; c != '>' && c != ' ' {
				continue
			}
			inner := s[open+1 : len(s)-len("</"+tag+">")]
			text = strings.ReplaceAll(inner, "&lt;/"+tag+"&gt;", "</"+tag+">")
			changed = true
			break
		}
	}
	return strings.TrimSpace(text)
}
