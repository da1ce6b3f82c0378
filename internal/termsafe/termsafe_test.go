package termsafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

func TestString(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain text and UTF-8 stay", "héllo, wörld ✓\n\tindented\r\n", "héllo, wörld ✓\n\tindented\r\n"},
		{"OSC 52 clipboard write", "before\x1b]52;c;ZWNobyBwd25lZA==\x07after", "before^[]52;c;ZWNobyBwd25lZA==^Gafter"},
		{"OSC 52 with ST", "\x1b]52;c;ZXZpbA==\x1b\\", "^[]52;c;ZXZpbA==^[\\"},
		{"OSC 8 spoofed link", "\x1b]8;;https://evil.example/\x1b\\https://good.example/\x1b]8;;\x1b\\", "^[]8;;https://evil.example/^[\\https://good.example/^[]8;;^[\\"},
		{"CSI erase and move", "secret\x1b[2K\x1b[1A\x1b[31mPASS\x1b[0m", "secret^[[2K^[[1A^[[31mPASS^[[0m"},
		{"8-bit CSI as a C1 rune", "a\u009b2Jb", "a<U+009B>2Jb"},
		{"8-bit CSI as a raw byte", "a\x9b2Jb", `a\x9b2Jb`},
		{"lone carriage return overwrites a line", "Verdict: Fail\rVerdict: Pass", "Verdict: Fail^MVerdict: Pass"},
		{"bidi override", "file\u202etxt.exe", "file<U+202E>txt.exe"},
		{"NUL, BEL, DEL", "\x00\x07\x7f", "^@^G^?"},
		{"noncharacters YAML refuses", "all good \ufffe\uffff", "all good <U+FFFE><U+FFFF>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.in)
			if got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.ContainsAny(got, "\x1b\x07\u009b\u202e\ufffe\uffff") {
				t.Errorf("String(%q) still holds a control character: %q", tc.in, got)
			}
			// Every split of the input through a Writer gives the same text.
			for cut := 0; cut <= len(tc.in); cut++ {
				var b bytes.Buffer
				w := NewWriter(&b)
				if _, err := w.Write([]byte(tc.in[:cut])); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write([]byte(tc.in[cut:])); err != nil {
					t.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				if b.String() != tc.want {
					t.Fatalf("Writer cut at %d: %q, want %q", cut, b.String(), tc.want)
				}
			}
		})
	}
}

// TestStringIsYAMLSafe: whatever an agent prints, what String makes of it
// is a string every YAML view of a run takes (kubectl get -o yaml and
// `harnessfacts run` convert the run's JSON with a YAML parser, which
// refuses C0 and C1 controls but tab, newline and U+0085, and U+FFFE and
// U+FFFF). One rune the parser refused in a run's output tail made the
// run, and every list holding it, unprintable as YAML.
func TestStringIsYAMLSafe(t *testing.T) {
	var all strings.Builder
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if utf8.ValidRune(r) {
			all.WriteRune(r)
		}
	}
	all.WriteString("\xff\xc2") // and bytes that are not UTF-8
	doc, err := json.Marshal(map[string]string{"outputTail": String(all.String())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := yaml.JSONToYAML(doc); err != nil {
		t.Errorf("a YAML parser refuses what String made of every rune: %v", err)
	}
}
