package fakeprovider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// geminiTools are the tool declarations Gemini CLI 0.61.0 sends in yolo
// mode with the run's MCP server (a subset, in its order).
var geminiTools = []string{"list_directory", "read_file", "replace", "write_file", "run_shell_command", "mcp_harnessfacts_get_token"}

// geminiPrompt is the first user content of a real request: the CLI's
// session context, then the prompt.
var geminiPrompt = map[string]any{"role": "user", "parts": []any{
	map[string]any{"text": "<session_context>\nThis is the Gemini CLI.\n- **Workspace Directories:**\n  - /work/ws\n</session_context>"},
	map[string]any{"text": "Edit greeting.txt so that its only line is \"hello, harness\"."},
}}

// geminiBody is a request shaped like Gemini CLI's: the contents so far and
// the tools offered (none: a side request).
func geminiBody(t *testing.T, tools []string, contents ...map[string]any) string {
	t.Helper()
	req := map[string]any{
		"contents":          append([]map[string]any{geminiPrompt}, contents...),
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "You are a non-interactive CLI agent."}}},
		"generationConfig":  map[string]any{"temperature": 1, "thinkingConfig": map[string]any{"includeThoughts": true}},
	}
	if len(tools) > 0 {
		var decls []any
		for _, n := range tools {
			decls = append(decls, map[string]any{"name": n, "description": "d", "parametersJsonSchema": map[string]any{"type": "object"}})
		}
		req["tools"] = []any{map[string]any{"functionDeclarations": decls}}
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// geminiCallAndResult is one past round: the model's call, and the CLI's
// result, as the CLI sends them back.
func geminiCallAndResult(name string, args map[string]any, output string) []map[string]any {
	return []map[string]any{
		{"role": "model", "parts": []any{map[string]any{
			"functionCall":     map[string]any{"id": name + "_1", "name": name, "args": args},
			"thoughtSignature": "skip_thought_signature_validator",
		}}},
		{"role": "user", "parts": []any{map[string]any{
			"functionResponse": map[string]any{"id": name + "_1", "name": name, "response": map[string]any{"output": output}},
		}}},
	}
}

func newGeminiProvider(t *testing.T) (*Provider, *httptest.Server) {
	t.Helper()
	s, err := LoadScript(filepath.Join("..", "..", "fixtures", "hello", ScriptName))
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Scripts: map[string]*Script{"hello": s}})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

// geminiPost sends body as Gemini CLI does and returns the reply's
// GenerateContentResponse chunks.
func geminiPost(t *testing.T, url, body string) (*http.Response, []geminiTestResponse) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-goog-api-key", "test-gemini-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var out []geminiTestResponse
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, ev := range strings.Split(strings.TrimSpace(string(raw)), "\n\n") {
			data, ok := strings.CutPrefix(ev, "data: ")
			if !ok {
				t.Fatalf("an SSE event that is not data-only: %q", ev)
			}
			var r geminiTestResponse
			if err := json.Unmarshal([]byte(data), &r); err != nil {
				t.Fatalf("%v: %s", err, data)
			}
			out = append(out, r)
		}
		return resp, out
	}
	var r geminiTestResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return resp, []geminiTestResponse{r}
}

type geminiTestResponse struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         string `json:"text"`
				FunctionCall *struct {
					Name string         `json:"name"`
					Args map[string]any `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *struct {
		TotalTokenCount int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
}

// geminiGot is what a reply did, for comparison.
type geminiGot struct {
	Text   string
	Call   string
	Args   map[string]any
	Finish string
}

func geminiReplyOf(t *testing.T, rs []geminiTestResponse) geminiGot {
	t.Helper()
	var g geminiGot
	for _, r := range rs {
		if len(r.Candidates) != 1 || r.UsageMetadata == nil {
			t.Fatalf("want one candidate and usage metadata per chunk: %+v", r)
		}
		c := r.Candidates[0]
		if c.Content.Role != "model" {
			t.Errorf("role %q, want model", c.Content.Role)
		}
		for _, p := range c.Content.Parts {
			g.Text += p.Text
			if p.FunctionCall != nil {
				g.Call, g.Args = p.FunctionCall.Name, p.FunctionCall.Args
			}
		}
		if c.FinishReason != "" {
			g.Finish = c.FinishReason
		}
	}
	return g
}

func TestGeminiFollowsTheScript(t *testing.T) {
	p, srv := newGeminiProvider(t)
	url := srv.URL + "/s/hello/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
	write1 := geminiCallAndResult("write_file", map[string]any{"file_path": "greeting.txt", "content": "hello, harness\n"},
		"Successfully overwrote file: /work/ws/greeting.txt. Here is the updated code:\nhello, harness\n")
	// Gemini CLI wraps an MCP tool's text in <untrusted_context>.
	token := geminiCallAndResult("mcp_harnessfacts_get_token", map[string]any{},
		"<untrusted_context>\nhft_DwakYxfetLXrzTRlOAKuPSlCDtPBswyV\n</untrusted_context>")
	write2 := geminiCallAndResult("write_file", map[string]any{"file_path": "token.txt", "content": "hft_DwakYxfetLXrzTRlOAKuPSlCDtPBswyV\n"},
		"Successfully created and wrote to new file: /work/ws/token.txt.")
	answer := "greeting.txt now says hello, harness, and token.txt holds the token get_token returned."
	for _, tc := range []struct {
		name     string
		contents []map[string]any
		want     geminiGot
	}{
		{"write greeting", nil, geminiGot{Call: "write_file", Args: map[string]any{"file_path": "greeting.txt", "content": "hello, harness\n"}, Finish: "STOP"}},
		{"call get_token", write1, geminiGot{Call: "mcp_harnessfacts_get_token", Args: map[string]any{}, Finish: "STOP"}},
		{"write the bare token", append(append([]map[string]any{}, write1...), token...),
			geminiGot{Call: "write_file", Args: map[string]any{"file_path": "token.txt", "content": "hft_DwakYxfetLXrzTRlOAKuPSlCDtPBswyV\n"}, Finish: "STOP"}},
		{"answer", append(append(append([]map[string]any{}, write1...), token...), write2...), geminiGot{Text: answer, Finish: "STOP"}},
	} {
		resp, rs := geminiPost(t, url, geminiBody(t, geminiTools, tc.contents...))
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.ContentLength <= 0 {
			t.Errorf("%s: Content-Type %q Content-Length %d, want a complete event stream", tc.name, ct, resp.ContentLength)
		}
		if diff := cmp.Diff(tc.want, geminiReplyOf(t, rs)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	recs := p.Requests()
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	r := recs[1]
	if r.Dialect != "gemini" || r.Script != "hello" || r.Model != "gemini-2.5-pro" || r.Action != ActMCP || r.Tool != "mcp_harnessfacts_get_token" ||
		r.Results != 1 || r.AuthHeader != "x-goog-api-key" || r.KeySHA256 != KeyDigest("test-gemini-key") || r.Error != "" {
		t.Errorf("record %+v", r)
	}
}

func TestGeminiSideRequestGetsText(t *testing.T) {
	p, srv := newGeminiProvider(t)
	// A request without tools (a summary, a JSON side question) gets the
	// answer as text, on either method, and does not move the script.
	for _, method := range []string{"generateContent", "streamGenerateContent?alt=sse"} {
		_, rs := geminiPost(t, srv.URL+"/s/hello/v1beta/models/gemini-2.5-flash:"+method, geminiBody(t, nil))
		got := geminiReplyOf(t, rs)
		if got.Call != "" || !strings.Contains(got.Text, "hello, harness") || got.Finish != "STOP" {
			t.Errorf("%s: %+v, want the answer as text", method, got)
		}
	}
	_, rs := geminiPost(t, srv.URL+"/s/hello/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", geminiBody(t, geminiTools))
	if got := geminiReplyOf(t, rs); got.Call != "write_file" {
		t.Errorf("after side requests: %+v, want the first step", got)
	}
	if recs := p.Requests(); recs[0].Model != "gemini-2.5-flash" || recs[0].Action != ActAnswer {
		t.Errorf("record %+v", recs[0])
	}
}

func TestGeminiWritesThroughTheShellWithoutWriteFile(t *testing.T) {
	_, srv := newGeminiProvider(t)
	// Approval mode default removes write_file from a headless run's list.
	_, rs := geminiPost(t, srv.URL+"/s/hello/v1beta/models/m:streamGenerateContent?alt=sse",
		geminiBody(t, []string{"read_file", "run_shell_command", "mcp_harnessfacts_get_token"}))
	got := geminiReplyOf(t, rs)
	if got.Call != "run_shell_command" || got.Args["command"] != ShellWrite("greeting.txt", "hello, harness\n") {
		t.Errorf("%+v, want the write through run_shell_command", got)
	}
	// With neither tool, the task ends with text and the log says why.
	p, srv := newGeminiProvider(t)
	_, rs = geminiPost(t, srv.URL+"/s/hello/v1beta/models/m:streamGenerateContent?alt=sse", geminiBody(t, []string{"read_file"}))
	if got := geminiReplyOf(t, rs); got.Call != "" || got.Text == "" {
		t.Errorf("%+v, want text", got)
	}
	if r := p.Requests()[0]; r.Action != ActAnswer || !strings.Contains(r.Error, "write_file") {
		t.Errorf("record %+v, want an answer and an error naming write_file", r)
	}
}

func TestGeminiRejectsBadRequests(t *testing.T) {
	_, srv := newGeminiProvider(t)
	resp, err := http.Post(srv.URL+"/s/hello/v1beta/models/m:streamGenerateContent?alt=sse", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad JSON: status %d, want 400", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/s/hello/v1beta/models/m:countTokens", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("countTokens: status %d, want 404", resp.StatusCode)
	}
}

func TestGeminiResultText(t *testing.T) {
	for name, tc := range map[string]struct{ raw, want string }{
		"output":            {`{"output":"ok"}`, "ok"},
		"untrusted":         {`{"output":"<untrusted_context>\nhft_abc\n</untrusted_context>"}`, "hft_abc"},
		"untrusted escaped": {`{"output":"<untrusted_context>\na &lt;/untrusted_context&gt; b\n</untrusted_context>"}`, "a </untrusted_context> b"},
		"shell output":      {`{"output":"<output>\nhello\n</output>"}`, "hello"},
		"error":             {`{"error":"boom"}`, "boom"},
		"content":           {`{"content":[{"type":"text","text":"hft_x"}]}`, "hft_x"},
		"not a wrapper":     {`{"output":"<outputs>x</outputs>"}`, "<outputs>x</outputs>"},
		"other":             {`{"llmContent":"x"}`, `{"llmContent":"x"}`},
	} {
		if got := geminiResultText(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}
