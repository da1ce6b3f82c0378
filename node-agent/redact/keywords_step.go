package redact

import (
	"fmt"
	"unsafe"
)

// step advances the six lanes' automata, lane i reading buf[base+i*stride+k]
// for k from j, until k reaches n (it returns n) or until keywords end in
// a lane once recs is full (it returns that k, the states in s). Until
// then, each k at which keywords end in some lane is noted in recs (k and
// the six states) and the scan goes on: it returns how many it noted.
//
// This is the one place the package reads and writes memory without Go's
// bounds checks. Each lane's next state waits on an add and a load, and
// the scan is fastest with as many lanes as the registers hold: with
// slices, the six lanes' pointers, lengths and the table's bounds did not
// fit, went through the stack at every byte, and the six lanes ran no
// faster than four. Reading through one pointer and a stride, the scan is
// about 1.35× faster (BenchmarkKeywordScan, docs/performance.md). Noting
// the ends in recs, rather than returning through here and hitsIn at each,
// is what keeps output dense in keywords fast (an agent's usage lines name
// "tokens" three times each: 8-10 % more of it a second). It stays
// memory-safe because:
//   - the bytes read are checked to lie in buf before the loop (the last
//     lane's last byte is buf[base+5*stride+n-1]);
//   - every state is a row start of delta: states come from delta, whose
//     entries newKwDFA checks (checkRows) to be row starts, and a row has
//     256 entries, so a row start plus a byte is in delta. That a state
//     ends keywords is a bit of its row number (outBit), not a flag added
//     to it, so the loop goes on from it as it is;
//   - a note is written only at r != rEnd, r starting at recs[0] and
//     moving one kwRec at a time: within recs.
func (d *kwDFA) step(buf []byte, base, stride, j, n int, s *[lanes]uint32, recs *[kwRecs]kwRec) (k, noted int) {
	if base < 0 || stride < 0 || j < 0 || j > n || base+(lanes-1)*stride+n > len(buf) {
		panic(fmt.Sprintf("redact: keyword scan out of its buffer (base %d, stride %d, %d..%d of %d)", base, stride, j, n, len(buf)))
	}
	if j == n {
		return n, 0
	}
	p := unsafe.Pointer(&buf[base+j])
	r0 := unsafe.Pointer(&recs[0])
	q, r, s0, s1, s2, s3, s4, s5 := step6(unsafe.Pointer(unsafe.SliceData(d.delta)), p, unsafe.Add(p, n-j), uintptr(stride),
		r0, unsafe.Add(r0, kwRecs*unsafe.Sizeof(kwRec{})),
		d.outBit, s[0], s[1], s[2], s[3], s[4], s[5])
	*s = [lanes]uint32{s0, s1, s2, s3, s4, s5}
	return j + int(uintptr(q)-uintptr(p)), int((uintptr(r) - uintptr(r0)) / unsafe.Sizeof(kwRec{}))
}

// kwRec is a step of the scan at which keywords ended in some lane: the
// step (from where that scan began) and the six states (outBit set on
// those that ended).
type kwRec struct {
	k uint32
	s [lanes]uint32
}

// kwRecs is how many steps with ends step notes before it returns.
const kwRecs = 64

// step6 is step's loop: it runs the lanes from p to end (run6), notes
// each step with ends at r until rEnd, and returns where q and r stopped.
func step6(dp, p, end unsafe.Pointer, stride uintptr, r, rEnd unsafe.Pointer, bit, s0, s1, s2, s3, s4, s5 uint32) (unsafe.Pointer, unsafe.Pointer, uint32, uint32, uint32, uint32, uint32, uint32) {
	q := p
	for {
		q, s0, s1, s2, s3, s4, s5 = run6(dp, q, end, stride, bit, s0, s1, s2, s3, s4, s5)
		if q == end || r == rEnd {
			return q, r, s0, s1, s2, s3, s4, s5
		}
		*(*kwRec)(r) = kwRec{k: uint32(uintptr(q) - uintptr(p)), s: [lanes]uint32{s0, s1, s2, s3, s4, s5}}
		r = unsafe.Add(r, unsafe.Sizeof(kwRec{}))
		q = unsafe.Add(q, 1)
	}
}

// run6 is the loop over bytes that end no keyword in any lane, in a
// function of its own with its state in arguments and results so that the
// compiler keeps all of it in registers: six lookups and a test a byte. It
// returns at end, or where keywords end in some lane.
//
//go:noinline
func run6(dp, q, end unsafe.Pointer, stride uintptr, bit, s0, s1, s2, s3, s4, s5 uint32) (unsafe.Pointer, uint32, uint32, uint32, uint32, uint32, uint32) {
	for ; q != end; q = unsafe.Add(q, 1) {
		l := q
		s0 = *(*uint32)(unsafe.Add(dp, uintptr(s0+uint32(*(*byte)(l)))*4))
		l = unsafe.Add(l, stride)
		s1 = *(*uint32)(unsafe.Add(dp, uintptr(s1+uint32(*(*byte)(l)))*4))
		l = unsafe.Add(l, stride)
		s2 = *(*uint32)(unsafe.Add(dp, uintptr(s2+uint32(*(*byte)(l)))*4))
		l = unsafe.Add(l, stride)
		s3 = *(*uint32)(unsafe.Add(dp, uintptr(s3+uint32(*(*byte)(l)))*4))
		l = unsafe.Add(l, stride)
		s4 = *(*uint32)(unsafe.Add(dp, uintptr(s4+uint32(*(*byte)(l)))*4))
		l = unsafe.Add(l, stride)
		s5 = *(*uint32)(unsafe.Add(dp, uintptr(s5+uint32(*(*byte)(l)))*4))
		if (s0|s1|s2|s3|s4|s5)&bit != 0 {
			break
		}
	}
	return q, s0, s1, s2, s3, s4, s5
}

// checkRows panics unless every entry of delta is the start of one of its
// rows: what step relies on to read the table without
// bounds checks.
func (d *kwDFA) checkRows() {
	if len(d.delta)%256 != 0 || len(d.delta) == 0 {
		panic("redact: keyword table is not whole rows")
	}
	for i, v := range d.delta {
		if v%256 != 0 || int(v) >= len(d.delta) {
			panic(fmt.Sprintf("redact: keyword table entry %d (%d) is not a row start", i, v))
		}
	}
}
