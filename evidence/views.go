package evidence

import (
	"bytes"
	"compress/gzip"
	"io"
)

// A credential can hide from a byte-for-byte scan in two ways the scan also looks through:
// inside a gzip-compressed file, and in base64 wrapped at a fixed width (PEM, MIME: 64 or 76
// columns), where a line break splits the secret's base64 form. scanViews returns a file and
// the views of it that undo each.

// maxGunzipBytes bounds what one compressed file may expand to for scanning.
const maxGunzipBytes = 256 << 20

// minWrappedLine is the shortest line taken as part of a wrapped base64 block.
const minWrappedLine = 16

// scanViews returns f, its decompressed content when it is gzip (named "<file> (gunzipped)"),
// and each of those with wrapped base64 blocks joined ("… (base64 lines joined)").
func scanViews(f bundleFile) []bundleFile {
	views := []bundleFile{f}
	if isGzip(f.data) {
		if zr, err := gzip.NewReader(bytes.NewReader(f.data)); err == nil {
			if b, err := io.ReadAll(io.LimitReader(zr, maxGunzipBytes)); len(b) > 0 && (err == nil || err == io.ErrUnexpectedEOF) {
				views = append(views, bundleFile{rel: f.rel + " (gunzipped)", data: b})
			}
		}
	}
	for _, v := range views {
		if j, ok := joinWrappedBase64(v.data, nil); ok {
			views = append(views, bundleFile{rel: v.rel + " (base64 lines joined)", data: j})
		}
	}
	return views
}

// wrappedBlock is one run of at least two consecutive lines that are each only base64
// characters (after leading blanks, before a trailing '\r'): per line, the content's byte range.
type wrappedBlock struct {
	lines [][2]int
}

// wrappedBlocks finds the wrapped base64 blocks of b.
func wrappedBlocks(b []byte) []wrappedBlock {
	var out []wrappedBlock
	var cur wrappedBlock
	flush := func() {
		if len(cur.lines) >= 2 {
			out = append(out, cur)
		}
		cur = wrappedBlock{}
	}
	for off := 0; off < len(b); {
		end := bytes.IndexByte(b[off:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += off
		}
		s, e := off, end
		for s < e && (b[s] == ' ' || b[s] == '\t') {
			s++
		}
		if e > s && b[e-1] == '\r' {
			e--
		}
		// The first line of a block is a full-width one; the last may be short.
		if (e-s >= minWrappedLine || len(cur.lines) > 0 && e > s) && isBase64Text(b[s:e]) {
			cur.lines = append(cur.lines, [2]int{s, e})
		} else {
			flush()
		}
		off = end + 1
	}
	flush()
	return out
}

func isBase64Text(b []byte) bool {
	for _, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// joinWrappedBase64 returns b with the line breaks (and indentation) inside each wrapped
// base64 block removed, appended to dst; ok is false when b has no such block.
func joinWrappedBase64(b, dst []byte) ([]byte, bool) {
	blocks := wrappedBlocks(b)
	if len(blocks) == 0 {
		return nil, false
	}
	last := 0
	for _, bl := range blocks {
		first := bl.lines[0]
		dst = append(dst, b[last:first[1]]...)
		for _, ln := range bl.lines[1:] {
			dst = append(dst, b[ln[0]:ln[1]]...)
		}
		last = bl.lines[len(bl.lines)-1][1]
	}
	return append(dst, b[last:]...), true
}

// redactWrappedBase64 replaces every line of a wrapped base64 block that, joined, holds one of
// the run's secrets with Marker (indentation kept): the block cannot be redacted in part.
func (r *Redactor) redactWrappedBase64(b []byte) []byte {
	if r.lit.empty() {
		return b
	}
	blocks := wrappedBlocks(b)
	if len(blocks) == 0 {
		return b
	}
	var out []byte
	last := 0
	for _, bl := range blocks {
		var joined []byte
		for _, ln := range bl.lines {
			joined = append(joined, b[ln[0]:ln[1]]...)
		}
		if s, _, _ := r.lit.next(joined, 0); s < 0 {
			continue
		}
		for _, ln := range bl.lines {
			out = append(out, b[last:ln[0]]...)
			out = append(out, Marker...)
			last = ln[1]
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}
