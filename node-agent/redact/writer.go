package redact

import (
	"io"
	"runtime"
	"sort"
)

// A Writer's batch is how much new input it gathers before scanning, so
// that the per-scan cost (handing half of the scan to a second goroutine,
// re-scanning the held window) is spread over many bytes. It starts at
// minBatch and doubles, up to maxBatch, each time a batch fills: only a
// stream that writes fast (megabytes between two flushes) gets the larger
// buffer. With 64 MiB of agent output in 32 KiB writes, 1 MiB batches ran
// the whole output pipeline at 1,166-1,225 MB/s against 1,006-1,046 with
// 256 KiB (BenchmarkOutputPipeline, same machine and hour).
const minBatch, maxBatch = 256 << 10, 1 << 20

// Writer redacts a stream and writes the result to another writer. A long
// batch is written to it on another goroutine while the stream goes on, one
// write at a time and in order; Flush, FlushLive and Close return once
// everything they wrote out has been written. It holds
// back up to the Redactor's Window() bytes between writes; Flush or Close
// writes them out.
//
// A live view (Tee) gets the same redacted stream from the same search,
// and, at FlushLive, the held bytes early: one search of the stream serves
// both (with a Writer of its own, a live view doubled the redactor's work
// on every byte an agent wrote).
type Writer struct {
	r   *Redactor
	dst io.Writer
	// buf is [context | pending]: context (buf[:ctx]) was already written
	// out and is kept only so that rules see what precedes pending.
	buf   []byte
	ctx   int
	batch int // 0 until the first write
	out   []byte
	sc    scratch
	n     int64
	err   error
	// Write-behind (see emit): while a batch's bytes are written out on
	// another goroutine (inflight), they stay in spare, the other batch
	// buffer, and the stream goes on in buf.
	spare    []byte
	outSpare []byte
	inflight bool
	written  chan error

	// The live view (Tee): base is the stream offset of buf[0], liveAt
	// the offset up to which live has the stream (past what dst has
	// after a FlushLive).
	live    io.Writer
	base    int64
	liveAt  int64
	liveOut []byte
}

// NewWriter returns a Writer that writes the redacted stream to dst.
func (r *Redactor) NewWriter(dst io.Writer) *Writer {
	return &Writer{r: r, dst: dst}
}

// Tee also writes the redacted stream to live, a live view; it is called
// before the first Write. live gets everything dst gets, in the same order,
// and what FlushLive passes on early, each byte once. Its errors are not
// the Writer's (a live view must not fail the log), and it must not block.
func (w *Writer) Tee(live io.Writer) { w.live = live }

// Write takes p; it returns len(p) unless writing to dst failed, in which
// case that error is returned now (or, for a write behind the stream, by a
// later call, Close at the latest) and by every later call.
func (w *Writer) Write(p []byte) (int, error) {
	if w.poll() != nil {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		if w.buf == nil {
			w.batch = minBatch
			w.buf = make([]byte, 0, 2*w.r.window+w.batch)
		}
		take := min(w.ctx+w.r.window+w.batch-len(w.buf), len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		written += take
		if len(w.buf)-w.ctx >= w.r.window+w.batch {
			if err := w.process(false); err != nil {
				return written, err
			}
			if w.batch < maxBatch {
				w.batch *= 2
				w.buf = append(make([]byte, 0, 2*w.r.window+w.batch), w.buf...)
			}
		}
	}
	return written, nil
}

// Flush redacts and writes out everything held. A secret whose first part
// was written before a Flush and whose rest comes after it is not
// recognised as a whole, so flush only where the stream pauses for good
// (the process ended) — Close does exactly that.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	return w.settle(w.process(true))
}

// FlushLive writes what is held to the live view (Tee) only, except a tail
// that could be the start of one of the run's secrets: a live view must
// show a quiet stream's last lines now, but never the first lines of a
// multi-line secret (a PEM key printed line by line) that the log redacts
// whole. The tail stays held until more comes, a later FlushLive or Close.
// dst gets those bytes later, when the Writer would have written them
// anyway, redacted with what follows them: a secret whose first part a
// FlushLive passed on before its rest came is redacted whole in dst and
// from where the live view stood on in it, as a Flush would have.
func (w *Writer) FlushLive() error {
	if w.live == nil || w.err != nil {
		return w.err
	}
	// The live view's earlier bytes may still be on their way (emit).
	if err := w.settle(nil); err != nil {
		return err
	}
	limit := w.ctx + w.r.partialStart(w.buf[w.ctx:])
	from := w.liveFrom()
	if limit <= from {
		return nil
	}
	var cut int
	w.liveOut, cut, _ = w.redacted(w.spans(), from, limit, w.liveOut[:0])
	_, _ = w.live.Write(w.liveOut)
	w.liveAt = w.base + int64(cut)
	return nil
}

// liveFrom is where in buf the live view's next bytes begin: at ctx, or
// past it after a FlushLive.
func (w *Writer) liveFrom() int {
	return max(w.ctx, int(min(w.liveAt-w.base, int64(len(w.buf)))))
}

// Close flushes. It does not close the destination.
func (w *Writer) Close() error { return w.Flush() }

// Redactions counts the replacements made so far.
func (w *Writer) Redactions() int64 { return w.n }

// process redacts the pending bytes up to the emit limit (all of them when
// final) and writes them out.
func (w *Writer) process(final bool) error {
	limit := len(w.buf)
	if !final {
		limit -= w.r.window
	}
	return w.processTo(final, limit)
}

// spans searches the pending bytes (and the context the rules need) and
// returns what is to be replaced, in order.
func (w *Writer) spans() []span {
	spans := w.r.search(w.buf, w.ctx, &w.sc, runtime.GOMAXPROCS(0) > 1)
	if w.r.rules != nil {
		spans = w.r.rules.find(w.buf, w.r.keep, &w.sc, spans)
	}
	w.sc.spans = spans
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].s < spans[j].s || spans[i].s == spans[j].s && spans[i].e > spans[j].e
	})
	return spans
}

// processTo redacts the pending bytes and writes out those before limit.
func (w *Writer) processTo(final bool, limit int) error {
	if limit <= w.ctx {
		return nil
	}
	spans := w.spans()
	from := w.ctx
	if w.live != nil {
		from = w.liveFrom()
	}
	if !anyBefore(spans, w.ctx, limit) {
		// Nothing to replace (the common case): pass the bytes on from
		// the buffer itself rather than copying them into out first.
		behind := !final && limit-w.ctx >= splitMin && runtime.GOMAXPROCS(0) > 1
		var live []byte
		if w.live != nil && from < limit {
			live = w.buf[from:limit]
			w.liveAt = w.base + int64(limit)
		}
		if err := w.emit(w.buf[w.ctx:limit], live, behind); err != nil {
			return err
		}
		if behind {
			w.keepInSpare(limit)
		} else {
			w.keep(limit)
		}
		return nil
	}
	out, cut, n := w.redacted(spans, w.ctx, limit, w.out[:0])
	w.out = out
	w.n += int64(n)
	var live []byte
	behind := !final && len(out) >= splitMin && runtime.GOMAXPROCS(0) > 1
	switch {
	case w.live == nil || from >= cut:
	case from == w.ctx:
		live = out
	default:
		// The live view has part of these bytes already (FlushLive): it
		// gets the rest, redacted from where it stands. Rare, and its
		// buffer is not kept apart for a write behind: written now.
		w.liveOut, _, _ = w.redacted(spans, from, limit, w.liveOut[:0])
		live, behind = w.liveOut, false
	}
	if w.live != nil {
		w.liveAt = max(w.liveAt, w.base+int64(cut))
	}
	if len(out) > 0 || len(live) > 0 {
		if err := w.emit(out, live, behind); err != nil {
			return err
		}
		if behind {
			// The next batch's replacements go to the other buffer.
			w.out, w.outSpare = w.outSpare, w.out
		}
	}
	w.keep(cut)
	return nil
}

// redacted appends to out buf[from:limit] with spans (in order) replaced,
// and returns it, the end of what it replaced or passed on (past limit
// where a replacement reaches beyond it) and how many replacements it made.
func (w *Writer) redacted(spans []span, from, limit int, out []byte) ([]byte, int, int) {
	n := 0
	pos := from
	for i := 0; i < len(spans); {
		sp := spans[i]
		if sp.e <= pos {
			i++
			continue
		}
		if sp.s >= limit {
			break
		}
		// Merge every span overlapping this one.
		end := sp.e
		tag := sp.tag
		for i++; i < len(spans) && spans[i].s < end; i++ {
			end = max(end, spans[i].e)
			if tag != "" && spans[i].tag == "" {
				tag = ""
			}
		}
		if s := max(sp.s, pos); s > pos {
			out = append(out, w.buf[pos:s]...)
		}
		out = append(out, w.r.replacementFor(span{tag: tag})...)
		n++
		pos = end
	}
	if pos < limit {
		out = append(out, w.buf[pos:limit]...)
	}
	return out, max(pos, limit), n
}

// emit writes b to dst, and live to the live view, after the writes before
// them have ended. With behind, it writes on another goroutine and returns
// at once: the caller must leave the bytes alone until the next emit or
// settle, which wait for it.
// A long batch's bytes are written behind so that one core copies them
// into the capture or the spool while the next batch comes in and is
// searched (BenchmarkOutputPipeline); a write's error is returned by the
// next call.
func (w *Writer) emit(b, live []byte, behind bool) error {
	if err := w.settle(nil); err != nil {
		return err
	}
	if !behind {
		if len(live) > 0 {
			_, _ = w.live.Write(live)
		}
		if len(b) == 0 {
			return nil
		}
		if _, err := w.dst.Write(b); err != nil {
			w.err = err
			return err
		}
		return nil
	}
	if w.written == nil {
		w.written = make(chan error, 1)
	}
	w.inflight = true
	go func() {
		if len(live) > 0 {
			_, _ = w.live.Write(live)
		}
		_, err := w.dst.Write(b)
		w.written <- err
	}()
	return nil
}

// poll takes the result of a write in flight if it has ended, without
// waiting, and returns the Writer's error.
func (w *Writer) poll() error {
	if w.inflight {
		select {
		case err := <-w.written:
			w.inflight = false
			if err != nil && w.err == nil {
				w.err = err
			}
		default:
		}
	}
	return w.err
}

// settle waits for a write in flight and returns err or, when there is
// none, the Writer's error.
func (w *Writer) settle(err error) error {
	if w.inflight {
		w.inflight = false
		if werr := <-w.written; werr != nil && w.err == nil {
			w.err = werr
		}
	}
	if err != nil {
		return err
	}
	return w.err
}

// keepInSpare is keep for a buffer whose bytes are being written behind:
// the kept window goes to the front of the spare buffer, which becomes
// buf, and the buffer in flight becomes the spare (emit waits for its
// write before the next swap).
func (w *Writer) keepInSpare(cut int) {
	keepFrom := max(0, cut-w.r.window)
	if cap(w.spare) < cap(w.buf) {
		w.spare = make([]byte, 0, cap(w.buf))
	}
	next := append(w.spare[:0], w.buf[keepFrom:]...)
	w.spare, w.buf = w.buf, next
	w.ctx = cut - keepFrom
	w.base += int64(keepFrom)
}

// keep drops what is before cut, which was written out, except up to a
// window of it kept as context for the rules.
func (w *Writer) keep(cut int) {
	keepFrom := max(0, cut-w.r.window)
	w.buf = w.buf[:copy(w.buf, w.buf[keepFrom:])]
	w.ctx = cut - keepFrom
	w.base += int64(keepFrom)
}

// anyBefore reports whether a span ends after from and starts before limit:
// whether anything in buf[from:limit] is replaced.
func anyBefore(spans []span, from, limit int) bool {
	for _, sp := range spans {
		if sp.e > from && sp.s < limit {
			return true
		}
	}
	return false
}
