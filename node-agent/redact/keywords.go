package redact

// kwDFA finds every occurrence of a set of keywords, ignoring ASCII case,
// in one pass over the input: an Aho-Corasick automaton turned into a full
// transition table over byte classes (the bytes keywords use, upper case
// folded onto lower case, and one class for every other byte). Each input
// byte costs two table lookups, and nothing is lower-cased or allocated.
type kwDFA struct {
	class  [256]uint8
	nclass int
	// delta[state*nclass + class] is the next state, premultiplied by
	// nclass, with outFlag set when keywords end there.
	delta    []uint32
	outs     [][]int32
	patLen   []int
	maxLen   int
	numState int
}

// kwHit is a state with keywords ending just before end.
type kwHit struct {
	end   int32
	state uint32 // premultiplied, flag cleared
}

func newKwDFA(keywords []string) *kwDFA {
	d := &kwDFA{}
	// Byte classes.
	for _, k := range keywords {
		for i := 0; i < len(k); i++ {
			c := lower(k[i])
			if d.class[c] == 0 {
				d.nclass++
				d.class[c] = uint8(d.nclass)
			}
		}
	}
	d.nclass++ // class 0: any other byte
	for c := 'A'; c <= 'Z'; c++ {
		d.class[c] = d.class[c+'a'-'A']
	}
	// Trie.
	type node struct {
		next map[uint8]int
		fail int
		out  []int32
	}
	nodes := []node{{next: map[uint8]int{}}}
	for pi, k := range keywords {
		s := 0
		for i := 0; i < len(k); i++ {
			cl := d.class[lower(k[i])]
			nx, ok := nodes[s].next[cl]
			if !ok {
				nx = len(nodes)
				nodes = append(nodes, node{next: map[uint8]int{}})
				nodes[s].next[cl] = nx
			}
			s = nx
		}
		nodes[s].out = append(nodes[s].out, int32(pi))
		d.patLen = append(d.patLen, len(k))
		d.maxLen = max(d.maxLen, len(k))
	}
	// Breadth-first: fail links, outputs and the full table.
	d.numState = len(nodes)
	next := make([]int, len(nodes)*d.nclass)
	queue := []int{0}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for cl := 0; cl < d.nclass; cl++ {
			if nx, ok := nodes[s].next[uint8(cl)]; ok {
				if s == 0 {
					nodes[nx].fail = 0
				} else {
					nodes[nx].fail = next[nodes[s].fail*d.nclass+cl]
				}
				nodes[nx].out = append(nodes[nx].out, nodes[nodes[nx].fail].out...)
				next[s*d.nclass+cl] = nx
				queue = append(queue, nx)
			} else if s != 0 {
				next[s*d.nclass+cl] = next[nodes[s].fail*d.nclass+cl]
			}
		}
	}
	d.outs = make([][]int32, len(nodes))
	for i, n := range nodes {
		d.outs[i] = n.out
	}
	d.delta = make([]uint32, len(next))
	for i, nx := range next {
		v := uint32(nx * d.nclass)
		if len(nodes[nx].out) > 0 {
			v |= outFlag
		}
		d.delta[i] = v
	}
	return d
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// lanes is how many parts of the input scan at once: one automaton's
// next state waits on its last lookup, so four independent ones keep the
// processor busy.
const lanes = 4

// hits appends, in order of end, every place keywords end in buf. The input
// is cut into lanes scanned in one interleaved loop; each lane starts
// maxLen-1 bytes early, so a keyword across a cut is seen whole, and
// reports only the ends in its own part.
// lane holds the hits of each lane between calls, so that scans allocate
// nothing once warm.
func (d *kwDFA) hits(buf []byte, out []kwHit, lane *[lanes][]kwHit) []kwHit {
	n := len(buf)
	if n < 1<<12 || n >= 1<<31 {
		return d.scan(buf, 0, 0, n, out)
	}
	part := n / lanes
	var from, to, st [lanes]int // report ends in (from, to]; scan from st
	for i := 0; i < lanes; i++ {
		from[i], to[i] = i*part, (i+1)*part
		st[i] = max(0, from[i]-(d.maxLen-1))
	}
	to[lanes-1] = n
	common := to[0] - st[0]
	for i := 1; i < lanes; i++ {
		common = min(common, to[i]-st[i])
	}
	for i := range lane {
		lane[i] = lane[i][:0]
	}
	var s0, s1, s2, s3 uint32
	delta, class := d.delta, &d.class
	b0, b1, b2, b3 := buf[st[0]:st[0]+common], buf[st[1]:st[1]+common], buf[st[2]:st[2]+common], buf[st[3]:st[3]+common]
	b1, b2, b3 = b1[:len(b0)], b2[:len(b0)], b3[:len(b0)] // no bounds checks below
	for j := range b0 {
		s0 = delta[s0+uint32(class[b0[j]])]
		s1 = delta[s1+uint32(class[b1[j]])]
		s2 = delta[s2+uint32(class[b2[j]])]
		s3 = delta[s3+uint32(class[b3[j]])]
		if (s0|s1|s2|s3)&outFlag != 0 {
			if s0&outFlag != 0 {
				s0 &^= outFlag
				lane[0] = append(lane[0], kwHit{end: int32(st[0] + j + 1), state: s0})
			}
			if s1&outFlag != 0 {
				s1 &^= outFlag
				lane[1] = append(lane[1], kwHit{end: int32(st[1] + j + 1), state: s1})
			}
			if s2&outFlag != 0 {
				s2 &^= outFlag
				lane[2] = append(lane[2], kwHit{end: int32(st[2] + j + 1), state: s2})
			}
			if s3&outFlag != 0 {
				s3 &^= outFlag
				lane[3] = append(lane[3], kwHit{end: int32(st[3] + j + 1), state: s3})
			}
		}
	}
	states := [lanes]uint32{s0, s1, s2, s3}
	for i := 0; i < lanes; i++ {
		for _, h := range lane[i] {
			if int(h.end) > from[i] {
				out = append(out, h)
			}
		}
		// The rest of the lane, from where the loop stopped.
		out = d.scanFrom(buf, states[i], st[i]+common, from[i], to[i], out)
	}
	return out
}

// scan runs one automaton over buf[st:to], reporting ends in (from, to].
func (d *kwDFA) scan(buf []byte, st, from, to int, out []kwHit) []kwHit {
	return d.scanFrom(buf, 0, st, from, to, out)
}

func (d *kwDFA) scanFrom(buf []byte, s uint32, st, from, to int, out []kwHit) []kwHit {
	delta, class := d.delta, &d.class
	for i := st; i < to; i++ {
		s = delta[s+uint32(class[buf[i]])]
		if s&outFlag != 0 {
			s &^= outFlag
			if i+1 > from {
				out = append(out, kwHit{end: int32(i + 1), state: s})
			}
		}
	}
	return out
}

// outFlag marks a delta entry whose state ends keywords.
const outFlag = 1 << 31
