package redact

// kwDFA finds every occurrence of a set of keywords, ignoring ASCII case,
// in one pass over the input: an Aho-Corasick automaton turned into a full
// transition table indexed by state and input byte (upper case bytes lead
// where their lower case does). Each input byte costs one table lookup, and
// nothing is lower-cased or allocated.
//
// The table is indexed by the byte itself rather than by a byte class (the
// 40-odd bytes keywords use, and one class for all others), which would
// make it 6× smaller: the class lookup was a second load per byte, and the
// scan ran at about half the speed with it (docs/performance.md). With
// gitleaks' 241 keywords the table has about 1,250 states of 256 entries,
// 1.3 MB once per process; a scan of ordinary text touches the few rows of
// the shallow states.
type kwDFA struct {
	// delta[state+b] is the next state after byte b, premultiplied by 256;
	// a state ends keywords exactly when it has outBit (see newKwDFA).
	delta  []uint32
	outBit uint32
	outs   [][]int32
	patLen []int
	maxLen int
}

// kwHit is a state with keywords ending just before end.
type kwHit struct {
	end   int32
	state uint32 // premultiplied
}

// patterns are the keywords (indices) that end at a hit, longest first.
func (d *kwDFA) patterns(h kwHit) []int32 { return d.outs[h.state>>8] }

func newKwDFA(keywords []string) *kwDFA {
	d := &kwDFA{}
	// Byte classes, to build the automaton over the few bytes keywords use.
	var class [256]uint8
	nclass := 0
	for _, k := range keywords {
		for i := 0; i < len(k); i++ {
			c := lower(k[i])
			if class[c] == 0 {
				nclass++
				class[c] = uint8(nclass)
			}
		}
	}
	nclass++ // class 0: any other byte
	for c := 'A'; c <= 'Z'; c++ {
		class[c] = class[c+'a'-'A']
	}
	// Trie, in next: state s's child by class cl is next[s*nclass+cl], 0
	// where it has none (the root is no state's child). A table rather than
	// a map per state: this runs in every process that redacts, before
	// its first byte.
	maxStates := 1
	for _, k := range keywords {
		maxStates += len(k)
	}
	next := make([]int32, nclass, maxStates*nclass)
	outs := make([][]int32, 1, maxStates)
	for pi, k := range keywords {
		s := 0
		for i := 0; i < len(k); i++ {
			cl := int(class[lower(k[i])])
			nx := next[s*nclass+cl]
			if nx == 0 {
				nx = int32(len(outs))
				outs = append(outs, nil)
				next = append(next, make([]int32, nclass)...)
				next[s*nclass+cl] = nx
			}
			s = int(nx)
		}
		outs[s] = append(outs[s], int32(pi))
		d.patLen = append(d.patLen, len(k))
		d.maxLen = max(d.maxLen, len(k))
	}
	// Breadth-first: fail links, outputs and the full table. A state's row
	// is completed (a missing child becomes its fail state's) when the
	// state is taken from the queue, after every shallower state's, its
	// fail state's among them; until then its entries are its children.
	states := len(outs)
	fail := make([]int32, states)
	queue := make([]int32, 1, states)
	for h := 0; h < len(queue); h++ {
		s := int(queue[h])
		for cl := 0; cl < nclass; cl++ {
			if nx := next[s*nclass+cl]; nx != 0 {
				if s != 0 {
					fail[nx] = next[int(fail[s])*nclass+cl]
				}
				outs[nx] = append(outs[nx], outs[fail[nx]]...)
				queue = append(queue, nx)
			} else if s != 0 {
				next[s*nclass+cl] = next[int(fail[s])*nclass+cl]
			}
		}
	}
	// Rows: the states that end no keyword first (the root is row 0), then
	// those that end some from row P on, P a power of two at least as
	// large as either group, so that a state ends keywords exactly when
	// its bit P is set (outBit, premultiplied). The scan tests that bit
	// and goes on from the same state: no flag to clear between bytes.
	var ends, plain []int
	for s, out := range outs {
		if len(out) > 0 {
			ends = append(ends, s)
		} else {
			plain = append(plain, s)
		}
	}
	p := 1
	for p < max(len(plain), len(ends)) {
		p <<= 1
	}
	row := make([]int, states)
	for i, s := range plain {
		row[s] = i
	}
	for i, s := range ends {
		row[s] = p + i
	}
	rows := p + len(ends)
	d.outBit = uint32(p) << 8
	d.outs = make([][]int32, rows)
	for s, out := range outs {
		d.outs[row[s]] = out
	}
	// The table by byte: each state's row repeats its class row. Rows
	// between the two groups are unused; their entries lead to the root.
	d.delta = make([]uint32, rows*256)
	for s := range states {
		for b := 0; b < 256; b++ {
			d.delta[row[s]<<8|b] = uint32(row[next[s*nclass+int(class[b])]]) << 8
		}
	}
	d.checkRows()
	return d
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// lanes is how many parts of the input scan at once. One automaton's next
// state waits on its last lookup (an add and a load: about six cycles
// here), so independent automata over parts of the input keep the
// processor busy while each waits. Six is as many as the compiler keeps in
// registers with the loop's pointers; eight spilled to the stack and were
// slower (docs/performance.md).
const lanes = 6

// kwLanes is the lanes' memory, kept between scans so that they allocate
// nothing once warm: the hits of each lane, and the steps with ends the
// loop noted.
type kwLanes struct {
	hits [lanes][]kwHit
	recs [kwRecs]kwRec
}

// hitsIn appends, in order of end, the keywords that end in (from0, to0]
// of buf. The part is cut into lanes, equally spaced so that one pointer
// and a stride reach them all, scanned in one interleaved loop. Each lane
// starts ov = maxLen-1 bytes before the ends it reports (the first lane
// as far back as the buffer allows), so a keyword across a cut is seen
// whole; each lane reports only the ends in its own part.
func (d *kwDFA) hitsIn(buf []byte, from0, to0 int, out []kwHit, lane *kwLanes) []kwHit {
	ov := d.maxLen - 1
	base := max(0, from0-ov)
	stride := (to0 - base - ov) / lanes
	if to0-from0 < 1<<12 || stride <= 0 {
		return d.scan(buf, base, from0, to0, out)
	}
	// Lane i scans from st[i], reports ends in (from[i], to[i]].
	var st, from, to [lanes]int
	for i := range lanes {
		st[i] = base + i*stride
		from[i] = st[i] + ov
		to[i] = st[i] + stride + ov
	}
	from[0], to[lanes-1] = from0, to0
	common := stride + ov // every lane has at least this many bytes to scan
	for i := range lane.hits {
		lane.hits[i] = lane.hits[i][:0]
	}
	var s [lanes]uint32
	for j := 0; ; j++ {
		j0 := j
		var noted int
		j, noted = d.step(buf, base, stride, j, common, &s, &lane.recs)
		for _, r := range lane.recs[:noted] {
			for i := range lanes {
				if r.s[i]&d.outBit != 0 {
					lane.hits[i] = append(lane.hits[i], kwHit{end: int32(st[i] + j0 + int(r.k) + 1), state: r.s[i]})
				}
			}
		}
		if j == common {
			break
		}
		for i := range lanes {
			if s[i]&d.outBit != 0 {
				lane.hits[i] = append(lane.hits[i], kwHit{end: int32(st[i] + j + 1), state: s[i]})
			}
		}
	}
	for i := range lanes {
		for _, h := range lane.hits[i] {
			if int(h.end) > from[i] {
				out = append(out, h)
			}
		}
		// The rest of the lane (only the last has any), from where the
		// loop stopped.
		out = d.scanFrom(buf, s[i], st[i]+common, from[i], to[i], out)
	}
	return out
}

// scan runs one automaton over buf[st:to], reporting ends in (from, to].
func (d *kwDFA) scan(buf []byte, st, from, to int, out []kwHit) []kwHit {
	return d.scanFrom(buf, 0, st, from, to, out)
}

func (d *kwDFA) scanFrom(buf []byte, s uint32, st, from, to int, out []kwHit) []kwHit {
	delta := d.delta
	for i := st; i < to; i++ {
		s = delta[s+uint32(buf[i])]
		if s&d.outBit != 0 {
			if i+1 > from {
				out = append(out, kwHit{end: int32(i + 1), state: s})
			}
		}
	}
	return out
}
