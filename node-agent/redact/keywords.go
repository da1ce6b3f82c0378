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
	numState int
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

// walk calls fn(end, keyword) for every occurrence; end is the index just
// past it.
func (d *kwDFA) walk(buf []byte, fn func(end int, kw int32)) {
	var s uint32
	delta, class, nc := d.delta, &d.class, uint32(d.nclass)
	for i, c := range buf {
		s = delta[s+uint32(class[c])]
		if s&outFlag != 0 {
			s &^= outFlag
			for _, p := range d.outs[s/nc] {
				fn(i+1, p)
			}
		}
	}
}

// outFlag marks a delta entry whose state ends keywords.
const outFlag = 1 << 31
