package adapters

import (
	"strings"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func TestProviderRoot(t *testing.T) {
	for _, c := range []struct {
		adapter   harnessv1.Adapter
		url, want string
	}{
		{harnessv1.AdapterCodex, "http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"},
		{harnessv1.AdapterCodex, "http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080"},
		{harnessv1.AdapterAider, "https://openrouter.ai/api/v1", "https://openrouter.ai/api"},
		{harnessv1.AdapterGemini, "https://generativelanguage.googleapis.com/v1beta", "https://generativelanguage.googleapis.com"},
		{harnessv1.AdapterClaudeCode, "http://127.0.0.1:8080/s/hello/v1", "http://127.0.0.1:8080/s/hello"},
		// Left as written: no version at the end, a look-alike, a query,
		// and the run author's own commands.
		{harnessv1.AdapterClaudeCode, "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{harnessv1.AdapterClaudeCode, "http://127.0.0.1:8080/s/hello", "http://127.0.0.1:8080/s/hello"},
		{harnessv1.AdapterCodex, "http://h.test/v10", "http://h.test/v10"},
		{harnessv1.AdapterCodex, "http://h.test/apiv1", "http://h.test/apiv1"},
		{harnessv1.AdapterCodex, "http://h.test/v1?x=1", "http://h.test/v1?x=1"},
		{harnessv1.AdapterExec, "http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"},
		{harnessv1.AdapterOracle, "http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"},
		{harnessv1.AdapterCodex, "", ""},
	} {
		got, note := ProviderRoot(harnessv1.AgentSpec{Adapter: c.adapter, ProviderURL: c.url})
		if got != c.want {
			t.Errorf("%s %q: %q, want %q", c.adapter, c.url, got, c.want)
		}
		if changed := got != c.url; changed != (note != "") || changed && (!strings.Contains(note, c.url) || !strings.Contains(note, got)) {
			t.Errorf("%s %q: note %q", c.adapter, c.url, note)
		}
	}
}
