package fakeprovider

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRootPicksTheScriptByPrompt: a provider serving many fixtures at its
// root answers each request from the fixture whose prompt it carries, the
// longest when one prompt begins with another, whatever the JSON escapes.
func TestRootPicksTheScriptByPrompt(t *testing.T) {
	const edit = `Edit greeting.txt so that its only line is "hello, harness".`
	hello := edit + "\nThen call the get_token tool & write the <token> into token.txt."
	scripts := map[string]*Script{
		"edit":  {Steps: []Step{{Answer: "edited"}}, Prompt: edit},
		"hello": {Steps: []Step{{Answer: "helloed"}}, Prompt: hello},
	}
	p := New(Options{Scripts: scripts})
	srv := httptest.NewServer(p)
	defer srv.Close()
	ask := func(path, prompt string) int {
		body, err := json.Marshal(map[string]any{"model": "m", "stream": false,
			"messages": []map[string]any{{"role": "system", "content": "You are a coding agent."},
				{"role": "user", "content": "<context>cwd: /w</context>\n" + prompt + "\n"}}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.Post(srv.URL+path, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	for _, tc := range []struct{ prompt, want string }{{edit, "edit"}, {hello, "hello"}} {
		if code := ask("/v1/chat/completions", tc.prompt); code != http.StatusOK {
			t.Fatalf("%s: status %d", tc.want, code)
		}
		recs := p.Requests()
		if got := recs[len(recs)-1].Script; got != tc.want {
			t.Errorf("a request carrying the %s prompt was answered from %q", tc.want, got)
		}
	}
	if code := ask("/v1/chat/completions", "something else entirely"); code != http.StatusNotFound {
		t.Errorf("a request with no fixture's prompt: status %d, want 404", code)
	}
	if code := ask("/s/nope/v1/chat/completions", hello); code != http.StatusNotFound {
		t.Errorf("an unknown /s/NAME: status %d, want 404", code)
	}
	// /s/NAME still wins over the prompt.
	if code := ask("/s/edit/v1/chat/completions", hello); code != http.StatusOK {
		t.Fatalf("/s/edit: status %d", code)
	}
	recs := p.Requests()
	if got := recs[len(recs)-1].Script; got != "edit" {
		t.Errorf("/s/edit was answered from %q", got)
	}
}

// TestLoadFixtureScriptsReadsThePrompts: the fixtures of this repository
// each get their fixture.yaml's prompt.
func TestLoadFixtureScriptsReadsThePrompts(t *testing.T) {
	scripts, err := LoadFixtureScripts("../../fixtures")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hello", "edit"} {
		s := scripts[name]
		if s == nil || !strings.HasPrefix(s.Prompt, "Edit greeting.txt") {
			t.Errorf("%s: script %+v, want its fixture's prompt", name, s)
		}
	}
}
