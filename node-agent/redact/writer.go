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
}

// NewWriter returns a Writer that writes the redacted stream to dst.
func (r *Redactor) NewWriter(dst io.Writer) *Writer {
	return &Writer{r: r, dst: dst}
}

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

// FlushLive writes out what is held, except a tail that could be the start
// of one of the run's secrets: for a live view, which must show a quiet
// stream's last lines now, but never the first lines of a multi-line secret
// (a PEM key printed line by line) that output.log redacts whole. The tail
// stays held until more comes, a later FlushLive or Close.
func (w *Writer) FlushLive() error {
	if w.err != nil {
		return w.err
	}
	return w.settle(w.processTo(true, w.ctx+w.r.partialStart(w.buf[w.ctx:])))
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

// processTo redacts the pending bytes and writes out those before limit.
func (w *Writer) processTo(final bool, limit int) error {
	if limit <= w.ctx {
		return nil
	}
	spans := w.r.search(w.buf, w.ctx, &w.sc, runtime.GOMAXPROCS(0) > 1)
	if w.r.rules != nil {
		spans = w.r.rules.find(w.buf, w.r.keep, &w.sc, spans)
	}
	w.sc.spans = spans
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].s < spans[j].s || spans[i].s == spans[j].s && spans[i].e > spans[j].e
	})

	if !anyBefore(spans, w.ctx, limit) {
		// Nothing to replace (the common case): pass the bytes on from
		// the buffer itself rather than copying them into out first.
		behind := !final && limit-w.ctx >= splitMin && runtime.GOMAXPROCS(0) > 1
		if err := w.emit(w.buf[w.ctx:limit], behind); err != nil {
			return err
		}
		if behind {
			w.keepInSpare(limit)
		} else {
			w.keep(limit)
		}
		return nil
	}
	out := w.out[:0]
	pos := w.ctx
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
		w.n++
		pos = end
	}
	cut := max(pos, limit)
	if pos < limit {
		out = append(out, w.buf[pos:limit]...)
	}
	w.out = out
	if len(out) > 0 {
		behind := !final && len(out) >= splitMin && runtime.GOMAXPROCS(0) > 1
		if err := w.emit(out, behind); err != nil {
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

// emit writes b to dst after the write before it has ended. With behind,
// it writes on another goroutine and returns at once: the caller must
// leave b's bytes alone until the next emit or settle, which wait for it.
// A long batch's bytes are written behind so that one core copies them
// into the capture or the spool while the next batch comes in and is
// searched (BenchmarkOutputPipeline); a write's error is returned by the
// next call.
func (w *Writer) emit(b []byte, behind bool) error {
	if err := w.settle(nil); err != nil {
		return err
	}
	if !behind {
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
}

// keep drops what is before cut, which was written out, except up to a
// window of it kept as context for the rules.
func (w *Writer) keep(cut int) {
	keepFrom := max(0, cut-w.r.window)
	w.buf = w.buf[:copy(w.buf, w.buf[keepFrom:])]
	w.ctx = cut - keepFrom
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
