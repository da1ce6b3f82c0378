package redact

import (
	"bytes"
	"encoding/binary"
)

// gram is the q-gram length of the literal filter.
const gram = 4

// minSampled is the shortest needle the sampled filter handles; shorter ones
// are searched with bytes.Index.
const minSampled = 8

// literals finds every occurrence of a set of needles in one pass: it looks
// up every stride-th 4-byte gram of the input in the set of grams of the
// needles. An occurrence of a needle at least L long (the shortest) always
// contains a sampled gram when stride = L-3, and each gram hit is checked
// exactly against the needles that have that gram, at the offset they have it.
type literals struct {
	stride int
	bits   []uint64 // bloom bitset of gram hashes
	grams  map[uint32][]occurrence
	short  [][]byte
	maxLen int // the longest needle
}

type occurrence struct {
	needle []byte
	off    int
}

func newLiterals(needles [][]byte) *literals {
	l := &literals{grams: map[uint32][]occurrence{}, bits: make([]uint64, 1<<10)}
	minLen := 0
	for _, n := range needles {
		l.maxLen = max(l.maxLen, len(n))
		if len(n) < minSampled {
			l.short = append(l.short, n)
			continue
		}
		if minLen == 0 || len(n) < minLen {
			minLen = len(n)
		}
		for off := 0; off+gram <= len(n); off++ {
			g := binary.LittleEndian.Uint32(n[off:])
			l.grams[g] = append(l.grams[g], occurrence{needle: n, off: off})
			h := hashGram(g)
			l.bits[h>>6] |= 1 << (h & 63)
		}
	}
	l.stride = minLen - gram + 1
	return l
}

func hashGram(g uint32) uint32 { return (g * 2654435761) >> 16 }

// find appends the spans of every occurrence in buf.
func (l *literals) find(buf []byte, spans []span) []span {
	return l.findIn(buf, 0, len(buf), spans)
}

// findIn appends the spans of the occurrences in buf that start in
// [from, to): it searches buf[from:] as far as such an occurrence can reach.
func (l *literals) findIn(buf []byte, from, to int, spans []span) []span {
	part := buf[from:min(len(buf), to+l.maxLen-1)]
	first := len(spans)
	spans = l.findAll(part, spans)
	// Rebase to buf, and drop what starts at or after to (the next
	// part's, seen here only in the look-ahead).
	kept := spans[:first]
	for _, sp := range spans[first:] {
		if sp.s += from; sp.s < to {
			sp.e += from
			kept = append(kept, sp)
		}
	}
	return kept
}

// findAll appends the spans of every occurrence in buf.
func (l *literals) findAll(buf []byte, spans []span) []span {
	for _, n := range l.short {
		for off := 0; ; {
			i := bytes.Index(buf[off:], n)
			if i < 0 {
				break
			}
			spans = append(spans, span{s: off + i, e: off + i + len(n)})
			off += i + 1
		}
	}
	if l.stride <= 0 {
		return spans
	}
	last := -1 // the last span found, to skip the same one seen from another gram
	for i := 0; i+gram <= len(buf); i += l.stride {
		g := binary.LittleEndian.Uint32(buf[i:])
		h := hashGram(g)
		if l.bits[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		for _, o := range l.grams[g] {
			s := i - o.off
			if s < 0 || s+len(o.needle) > len(buf) || s == last || !bytes.Equal(buf[s:s+len(o.needle)], o.needle) {
				continue
			}
			spans = append(spans, span{s: s, e: s + len(o.needle)})
			last = s
		}
	}
	return spans
}
