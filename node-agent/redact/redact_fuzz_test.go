package redact

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRedact: whatever the secret, the data and the chunking, the output
// never contains the secret or any of its encoded forms, and without a
// secret in it the data comes out unchanged. A live view (Tee), flushed
// after the writes whose chunk byte has bit 0x40 set, never shows a form
// either, changes nothing in the log, and, without the rules and with
// nothing to redact, shows exactly what the log has.
func FuzzRedact(f *testing.F) {
	f.Add("sk-live-0123456789abcdef", []byte("key=sk-live-0123456789abcdef\n"), []byte{1})
	f.Add(`p"a\ss/w+rd=`, []byte(`{"password":"p\"a\\ss/w+rd="}`), []byte{3, 1, 4})
	f.Add("secret-value", []byte("c2VjcmV0LXZhbHVl eHNlY3JldC12YWx1ZQ== eHhzZWNyZXQtdmFsdWU="), []byte{2})
	f.Add("ab", []byte("aab abab b"), []byte{1, 1})
	f.Add("hunter2hunter2", []byte("api_key = \"hunter2hunter2\" ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"), []byte{0x85, 3})
	f.Fuzz(func(t *testing.T, secret string, data []byte, chunks []byte) {
		if secret == "" || len(secret) > 256 || len(data) > 1<<16 {
			return
		}
		// The token rules run too when the first chunk byte's high bit is set.
		rules := len(chunks) > 0 && chunks[0]&0x80 != 0
		r, err := New(Options{Secrets: []string{secret}, NoRules: !rules})
		if err != nil {
			if !strings.Contains(err.Error(), "delimiter") {
				t.Fatal(err)
			}
			return
		}
		var out, teedOut, live bytes.Buffer
		w, teed := r.NewWriter(&out), r.NewWriter(&teedOut)
		teed.Tee(&live)
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n, flush := 1, false
			if len(chunks) > 0 {
				c := chunks[i%len(chunks)]
				n, flush = int(c&0x3f)+1, c&0x40 != 0
			}
			n = min(n, len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			if _, err := teed.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			if flush {
				if err := teed.FlushLive(); err != nil {
					t.Fatal(err)
				}
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := teed.Close(); err != nil {
			t.Fatal(err)
		}
		got := out.Bytes()
		for i, form := range Forms(secret) {
			if i > 0 && len(form) < minForm {
				continue
			}
			if bytes.Contains(got, []byte(form)) {
				t.Fatalf("output %q contains form %q of secret %q", got, form, secret)
			}
			if bytes.Contains(live.Bytes(), []byte(form)) {
				t.Fatalf("the live view %q contains form %q of secret %q", live.Bytes(), form, secret)
			}
		}
		if !bytes.Equal(teedOut.Bytes(), got) {
			t.Fatalf("with a live view the log is %q, without %q", teedOut.Bytes(), got)
		}
		// (With the rules a live view may show more redacted than the log:
		// a rule's match may end where the stream then stood.)
		if !rules && w.Redactions() == 0 && !bytes.Equal(live.Bytes(), got) {
			t.Fatalf("nothing redacted but the live view %q differs from the log %q", live.Bytes(), got)
		}
		if !rules && w.Redactions() == 0 && !bytes.Equal(got, data) {
			t.Fatalf("nothing redacted but output %q differs from input %q", got, data)
		}
	})
}
