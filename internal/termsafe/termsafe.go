// Package termsafe makes text captured from an agent safe to show in a
// terminal or a page: control sequences become visible text instead of
// instructions to the terminal. An agent's output may hold OSC 52 (write
// the reader's clipboard), OSC 8 (a link whose text lies about its target),
// CSI sequences (move the cursor, erase what the reader saw, retitle the
// window) and Unicode bidirectional overrides (text that reads differently
// than it is). What is stored and hashed is never changed; only what the
// project's commands show to people passes through here.
//
// The rules, after `cat -v`:
//   - newline and tab are kept; a carriage return only before a newline;
//   - other C0 controls and DEL become caret notation (ESC is "^[", BEL "^G",
//     a lone carriage return "^M");
//   - C1 controls (U+0080–U+009F, where U+009B is an 8-bit CSI), the
//     bidirectional embedding, override and isolate characters, and the
//     noncharacters U+FFFE and U+FFFF become "<U+XXXX>";
//   - a byte that is not valid UTF-8 becomes "\xNN".
package termsafe

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every control sequence made visible and inert.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		appendRune(&b, r, n, s[i:i+n], i+n < len(s) && s[i+n] == '\n')
		i += n
	}
	return b.String()
}

// clean reports whether s has nothing to neutralise (the common case).
func clean(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, n) && (r != '\r' || i+1 >= len(s) || s[i+1] != '\n') {
			return false
		}
		i += n
	}
	return true
}

func unsafeRune(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n <= 1:
		return true
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0xfffe || r == 0xffff:
		// Valid UTF-8, but no YAML parser takes them (YAML's printable
		// set ends at U+FFFD): one in an agent's output tail made
		// `kubectl get -o yaml` of its run, and of every run listed
		// with it, fail ("yaml: control characters are not allowed"),
		// and `harnessfacts run` print no status at all.
		return true
	}
	return false
}

func appendRune(b *strings.Builder, r rune, n int, raw string, beforeNewline bool) {
	switch {
	case r == utf8.RuneError && n <= 1:
		if n == 1 {
			fmt.Fprintf(b, `\x%02x`, raw[0])
		}
	case r == '\r' && beforeNewline:
		b.WriteByte('\r')
	case r == 0x7f:
		b.WriteString("^?")
	case (r < 0x20 && r != '\n' && r != '\t'):
		b.WriteByte('^')
		b.WriteByte(byte(r) + '@')
	case unsafeRune(r, n):
		fmt.Fprintf(b, "<U+%04X>", r)
	default:
		b.WriteString(raw)
	}
}

// Writer neutralises what passes through it to W, as String does, across
// write boundaries: a UTF-8 sequence or a carriage return cut at the end of
// one Write is held until the next (or Flush).
type Writer struct {
	W       io.Writer
	pending []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{W: w} }

// Write neutralises p and writes it on. It reports len(p) when the
// neutralised text was written.
func (w *Writer) Write(p []byte) (int, error) {
	buf := append(w.pending, p...)
	w.pending = nil
	// Hold back what may continue in the next write: an incomplete UTF-8
	// sequence, or a carriage return whose next byte decides its fate.
	keep := 0
	if len(buf) > 0 && buf[len(buf)-1] == '\r' {
		keep = 1
	} else {
		for k := 1; k <= 3 && k <= len(buf); k++ {
			c := buf[len(buf)-k]
			if c < 0x80 {
				break
			}
			if c >= 0xc0 { // a start byte: is its sequence complete?
				if !utf8.FullRune(buf[len(buf)-k:]) {
					keep = k
				}
				break
			}
		}
	}
	out := String(string(buf[:len(buf)-keep]))
	w.pending = append([]byte(nil), buf[len(buf)-keep:]...)
	if _, err := io.WriteString(w.W, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what a Write held back.
func (w *Writer) Flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	out := String(string(w.pending))
	w.pending = nil
	_, err := io.WriteString(w.W, out)
	return err
}

// LinePrefix marks each line of an agent's output where harnessfacts' own
// lines are shown beside it on a terminal (`run --follow`, `logs -f`): no
// line the agent prints can pass for one of harnessfacts' (the end of its
// output, "ended: phase Succeeded, verdict Pass").
const LinePrefix = "| "

// LinePrefixer writes a prefix before each line of what passes through it.
type LinePrefixer struct {
	w       io.Writer
	prefix  string
	atStart bool
}

// NewLinePrefixer returns a LinePrefixer to w, at a line's start.
func NewLinePrefixer(w io.Writer, prefix string) *LinePrefixer {
	return &LinePrefixer{w: w, prefix: prefix, atStart: true}
}

// AtLineStart reports whether what was written so far ended a line.
func (lp *LinePrefixer) AtLineStart() bool { return lp.atStart }

func (lp *LinePrefixer) Write(b []byte) (int, error) {
	n := len(b)
	out := make([]byte, 0, n+len(lp.prefix))
	for len(b) > 0 {
		if lp.atStart {
			out = append(out, lp.prefix...)
			lp.atStart = false
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, b...)
			break
		}
		out = append(out, b[:i+1]...)
		b = b[i+1:]
		lp.atStart = true
	}
	if _, err := lp.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}
